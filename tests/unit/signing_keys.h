// Keys for the signing tests, as PEM: the Ed25519 keys of RFC 8032's TEST 1 and TEST 2 (section
// 7.1), whose signatures the RFC gives, and an X25519 key (the wrong kind).
#pragma once

namespace test_keys {

inline constexpr const char *rfc8032_1_private =
    "-----BEGIN PRIVATE KEY-----\n"
    "MC4CAQAwBQYDK2VwBCIEIJ1hsZ3v/VpguoRK9JLsLMREScVpezJpGXA7rAMcrn9g\n"
    "-----END PRIVATE KEY-----\n";
inline constexpr const char *rfc8032_1_public =
    "-----BEGIN PUBLIC KEY-----\n"
    "MCowBQYDK2VwAyEA11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=\n"
    "-----END PUBLIC KEY-----\n";
inline constexpr const char *rfc8032_2_private =
    "-----BEGIN PRIVATE KEY-----\n"
    "MC4CAQAwBQYDK2VwBCIEIEzNCJso/5banbbDRuwRTg9bijGfNaumJNqM9u1PuKb7\n"
    "-----END PRIVATE KEY-----\n";
inline constexpr const char *rfc8032_2_public =
    "-----BEGIN PUBLIC KEY-----\n"
    "MCowBQYDK2VwAyEAPUAXw+hDiVqStwqnTRt+vJyYLM8uxJaMwM1V8Sr0Zgw=\n"
    "-----END PUBLIC KEY-----\n";
inline constexpr const char *x25519_public =
    "-----BEGIN PUBLIC KEY-----\n"
    "MCowBQYDK2VuAyEAp8c2/pO4cEyucMZLFwKwhiBmt0is2sWufLzZ9AJCRSs=\n"
    "-----END PUBLIC KEY-----\n";

} // namespace test_keys
