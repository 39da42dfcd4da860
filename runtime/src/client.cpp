#include "cudaq_rt/client.h"

#include <algorithm>
#include <chrono>
#include <cstring>

namespace cudaq_rt {
namespace {

using Clock = std::chrono::steady_clock;

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

double us_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

// Tries `attempt` (a bridge send or receive) until it yields a value. Every few thousand empty
// tries it checks the kernel (a stream query costs a driver call) and the deadline, where it gives
// up saying what did not come (`waiting_for`).
template <class T, class Attempt>
Expected<T> poll(Server &server, Attempt attempt, Clock::time_point deadline, double timeout_s,
                 const char *waiting_for) {
  for (uint64_t polls = 1;; ++polls) {
    auto got = attempt();
    if (!got)
      return std::move(got).take_error();
    if (*got)
      return T(**got);
    if (polls % 4096 == 0) {
      if (auto st = server.check(); !st)
        return std::move(st).take_error();
      if (Clock::now() >= deadline)
        return make_error(server.report().package.string(), server.report().device.arch(), ": ",
                          waiting_for, " within ", timeout_s, " s");
    }
  }
}

Expected<size_t> next_response(Server &server, std::span<uint8_t> buffer,
                               Clock::time_point deadline, double timeout_s) {
  return poll<size_t>(
      server, [&] { return server.receive(buffer); }, deadline, timeout_s, "no response");
}

Status send_all(Server &server, std::span<const uint8_t> frame, Clock::time_point deadline,
                double timeout_s) {
  // send() says true when queued; as an optional it reads "a value when done".
  auto sent = poll<bool>(
      server,
      [&]() -> Expected<std::optional<bool>> {
        auto r = server.send(frame);
        if (!r)
          return std::move(r).take_error();
        return *r ? std::optional<bool>(true) : std::nullopt;
      },
      deadline, timeout_s, "no free slot in the bridge");
  if (!sent)
    return std::move(sent).take_error();
  return Status::ok();
}

} // namespace

Expected<Reply> call(Server &server, std::span<const uint8_t> frame, double timeout_s) {
  std::vector<uint8_t> buffer(server.report().slot_size);
  const auto t0 = Clock::now();
  const auto deadline = t0 + seconds(timeout_s);
  if (auto st = send_all(server, frame, deadline, timeout_s); !st)
    return std::move(st).take_error();
  auto size = next_response(server, buffer, deadline, timeout_s);
  if (!size)
    return std::move(size).take_error();
  const auto t1 = Clock::now();
  auto response = parse_response_frame(std::span(buffer.data(), *size));
  if (!response)
    return std::move(response).take_error();
  return Reply{std::move(*response), us_between(t0, t1)};
}

Expected<BenchResult> bench(Server &server, const std::string &handler,
                            std::span<const uint8_t> payload, const BenchOptions &opt) {
  const uint32_t inflight =
      std::max<uint32_t>(1, std::min<uint32_t>(opt.inflight, server.report().num_slots));
  std::vector<uint8_t> buffer(server.report().slot_size);
  std::vector<uint8_t> body(payload.begin(), payload.end());
  const uint64_t total = opt.warmup + opt.requests;
  // Send times by request_id modulo a ring larger than what can be in flight.
  std::vector<Clock::time_point> sent_at(size_t{inflight} * 2);
  std::vector<double> latencies;
  latencies.reserve(opt.requests);
  BenchResult r;
  uint64_t sent = 0, received = 0;
  Clock::time_point measured_from{};
  const uint32_t first_id = 1;
  while (received < total) {
    while (sent < total && sent - received < inflight) {
      const uint32_t id = first_id + static_cast<uint32_t>(sent);
      if (opt.expect_echo && body.size() >= 4)
        std::memcpy(body.data(), &id, 4);
      auto frame = build_request_frame(handler, body, id, id);
      if (!frame)
        return std::move(frame).take_error();
      if (sent == opt.warmup)
        measured_from = Clock::now();
      const auto now = Clock::now();
      if (auto st = send_all(server, *frame, now + seconds(opt.timeout_s), opt.timeout_s); !st)
        return std::move(st).take_error();
      sent_at[id % sent_at.size()] = now;
      ++sent;
    }
    auto size = next_response(server, buffer, Clock::now() + seconds(opt.timeout_s), opt.timeout_s);
    if (!size)
      return std::move(size).take_error();
    const auto now = Clock::now();
    auto response = parse_response_frame(std::span(buffer.data(), *size));
    const uint32_t want = first_id + static_cast<uint32_t>(received);
    bool right = response && response->status == 0 && response->request_id == want;
    if (right && opt.expect_echo) {
      std::vector<uint8_t> expected(body);
      if (expected.size() >= 4)
        std::memcpy(expected.data(), &want, 4);
      right = response->result == expected;
    }
    if (received >= opt.warmup) {
      r.wrong += right ? 0 : 1;
      latencies.push_back(us_between(sent_at[want % sent_at.size()], now));
    } else if (!right) {
      r.wrong += 1;
    }
    ++received;
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - measured_from).count();
  r.requests = opt.requests;
  r.requests_per_s = r.seconds > 0 ? double(opt.requests) / r.seconds : 0;
  r.latency = latency_stats(latencies);
  return r;
}

} // namespace cudaq_rt
