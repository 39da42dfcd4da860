#include "load/client.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <optional>
#include <thread>

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

// Waits up to `timeout_s` for at least one of the `outstanding` responses, and takes every one
// that has come: each into `buffer` (a slot's `stride` apart), its size into `sizes`. How many.
Expected<size_t> take_responses(Server &server, std::vector<uint8_t> &buffer, size_t stride,
                                std::vector<size_t> &sizes, size_t outstanding, double timeout_s,
                                uint32_t feeder = 0) {
  return poll<size_t>(
      server,
      [&]() -> Expected<std::optional<size_t>> {
        auto got = server.receive_batch(std::span(buffer.data(), outstanding * stride), stride,
                                        std::span(sizes.data(), outstanding), feeder);
        if (!got)
          return std::move(got).take_error();
        return *got ? std::optional<size_t>(*got) : std::nullopt;
      },
      Clock::now() + seconds(timeout_s), timeout_s, "no response");
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

namespace {

// One feeder's part of a benchmark (all of it where the bridge has one feeder): `requests` after
// `warmup`, `inflight` at a time, through feeder `feeder` of `feeders`.
struct FeedPart {
  uint32_t feeder = 0, feeders = 1;
  uint64_t requests = 0, warmup = 0;
  uint32_t inflight = 1;
};
struct FeedResult {
  uint64_t wrong = 0;
  std::vector<double> latencies;
  Clock::time_point measured_from{}, done_at{};
};

Expected<FeedResult> feed(Server &server, const std::vector<uint8_t> &tmpl,
                          std::span<const uint8_t> payload, const BenchOptions &opt,
                          const FeedPart &part) {
  const size_t stride = server.report().slot_size;
  const uint32_t inflight = part.inflight;
  const size_t frame_size = tmpl.size();
  const bool stamp_payload = opt.expect_echo && payload.size() >= 4;
  std::vector<uint8_t> frames(size_t{inflight} * frame_size);
  for (uint32_t i = 0; i < inflight; ++i) // per request, only the ids change
    std::memcpy(frames.data() + size_t{i} * frame_size, tmpl.data(), frame_size);
  std::vector<const void *> frame_ptrs(inflight);
  std::vector<size_t> frame_sizes(inflight, frame_size);
  std::vector<uint8_t> responses(size_t{inflight} * stride);
  std::vector<size_t> response_sizes(inflight);
  const uint64_t total = part.warmup + part.requests;
  // Send times by request number modulo a ring larger than what can be in flight (a power of
  // two: a mask, not a division, per request).
  std::vector<Clock::time_point> sent_at(std::bit_ceil(size_t{inflight} * 2));
  const size_t sent_mask = sent_at.size() - 1;
  FeedResult r;
  r.latencies.reserve(part.requests);
  uint64_t sent = 0, received = 0;
  // Request k of this feeder: ids apart from every other feeder's.
  auto id_of = [&](uint64_t k) {
    return 1u + part.feeder + part.feeders * static_cast<uint32_t>(k);
  };
  while (received < total) {
    // Fill the free slots, up to `inflight` in flight.
    const size_t room =
        static_cast<size_t>(std::min<uint64_t>(total - sent, inflight - (sent - received)));
    if (room > 0) {
      for (size_t i = 0; i < room; ++i) {
        uint8_t *f = frames.data() + i * frame_size;
        const uint32_t id = id_of(sent + i);
        std::memcpy(f + offsetof(cudaq_rt_request_header, request_id), &id, 4);
        if (stamp_payload)
          std::memcpy(f + CUDAQ_RT_HEADER_SIZE, &id, 4);
        frame_ptrs[i] = f;
      }
      if (sent <= part.warmup && part.warmup < sent + room)
        r.measured_from = Clock::now();
      auto queued = server.send_batch(std::span(frame_ptrs.data(), room),
                                      std::span(frame_sizes.data(), room), part.feeder);
      if (!queued)
        return std::move(queued).take_error();
      const auto now = Clock::now();
      for (size_t i = 0; i < *queued; ++i)
        sent_at[(sent + i) & sent_mask] = now;
      sent += *queued;
    }
    // Every request in flight fits the buffers: take what has come, at least one.
    const size_t outstanding = size_t(sent - received);
    auto taken = take_responses(server, responses, stride, response_sizes, outstanding,
                                opt.timeout_s, part.feeder);
    if (!taken)
      return std::move(taken).take_error();
    const auto now = Clock::now();
    for (size_t i = 0; i < *taken; ++i, ++received) {
      const uint8_t *resp = responses.data() + i * stride;
      const size_t size = response_sizes[i];
      const uint32_t want = id_of(received);
      cudaq_rt_response_header h{};
      bool right = size >= sizeof h;
      if (right) {
        std::memcpy(&h, resp, sizeof h);
        right = h.magic == CUDAQ_RT_RESPONSE_MAGIC && h.status == 0 && h.request_id == want &&
                size == sizeof h + h.result_len;
      }
      if (right && opt.expect_echo) {
        const uint8_t *result = resp + sizeof h;
        right = h.result_len == payload.size();
        if (right && stamp_payload) {
          uint32_t echoed;
          std::memcpy(&echoed, result, 4);
          right = echoed == want && std::equal(payload.begin() + 4, payload.end(), result + 4);
        } else if (right) {
          right = std::equal(payload.begin(), payload.end(), result);
        }
      }
      if (received >= part.warmup) {
        r.wrong += right ? 0 : 1;
        r.latencies.push_back(us_between(sent_at[received & sent_mask], now));
      } else if (!right) {
        r.wrong += 1;
      }
    }
  }
  r.done_at = Clock::now();
  return r;
}

} // namespace

Expected<BenchResult> bench(Server &server, uint32_t function_id, const std::string &label,
                            std::span<const uint8_t> payload, const BenchOptions &opt) {
  // One host thread per feeder of the bridge (Server::feeders: the loopback bridge's feeders=N),
  // each with its share of the requests, of the warm-up and of what is in flight, on slots of its
  // own; one feeder runs on this thread.
  const uint32_t feeders = server.feeders();
  const uint32_t share_slots = std::max<uint32_t>(1, server.report().num_slots / feeders);
  // One frame, built once; each request gets its request_id (and, for an echo, the same id in
  // its payload's first bytes) patched in. Requests go out and responses come back in batches
  // (Server::send_batch, receive_batch), so that one host thread keeps a warp-wide dispatcher
  // fed: nothing is allocated per request.
  auto built = build_request_frame(function_id, payload, 0, 0, label);
  if (!built)
    return std::move(built).take_error();
  const std::vector<uint8_t> tmpl = std::move(*built);
  std::vector<FeedPart> parts(feeders);
  for (uint32_t f = 0; f < feeders; ++f) {
    auto share = [&](uint64_t n) { return n / feeders + (f < n % feeders ? 1 : 0); };
    const uint32_t inflight = static_cast<uint32_t>(share(std::max<uint32_t>(opt.inflight, 1)));
    parts[f] = {f, feeders, share(opt.requests), share(opt.warmup),
                std::clamp<uint32_t>(inflight, 1, share_slots)};
  }
  std::vector<std::optional<Expected<FeedResult>>> results(feeders);
  {
    std::vector<std::jthread> threads;
    for (uint32_t f = 1; f < feeders; ++f)
      threads.emplace_back([&, f] { results[f] = feed(server, tmpl, payload, opt, parts[f]); });
    results[0] = feed(server, tmpl, payload, opt, parts[0]);
  } // joined
  BenchResult r;
  std::vector<double> latencies;
  latencies.reserve(opt.requests);
  Clock::time_point from = Clock::time_point::max(), to = Clock::time_point::min();
  for (uint32_t f = 0; f < feeders; ++f) {
    if (!*results[f])
      return std::move(*results[f]).take_error();
    FeedResult &part = **results[f];
    r.wrong += part.wrong;
    latencies.insert(latencies.end(), part.latencies.begin(), part.latencies.end());
    if (parts[f].requests == 0) // only warm-up: not in the measured time
      continue;
    from = std::min(from, part.measured_from);
    to = std::max(to, part.done_at);
  }
  r.seconds = from < to ? std::chrono::duration<double>(to - from).count() : 0;
  r.requests = opt.requests;
  r.requests_per_s = r.seconds > 0 ? double(opt.requests) / r.seconds : 0;
  r.latency = latency_stats(latencies);
  return r;
}

Status check_batch(const Server &server, const BatchCall &b) {
  const std::string subject = server.report().package.string();
  const size_t room_for_args = server.report().slot_size - CUDAQ_RT_HEADER_SIZE;
  if (!b.arg_lens.empty() && b.arg_lens.size() != b.count)
    return make_error(subject, b.arg_lens.size(), " argument lengths for ", b.count, " requests");
  for (size_t i = 0; i < b.count; ++i) {
    const size_t len = b.arg_lens.empty() ? b.arg_stride : b.arg_lens[i];
    if (len > b.arg_stride || len > room_for_args)
      return make_error(subject, "request ", i, ": ", len, " bytes of arguments, but ",
                        len > b.arg_stride ? cat("arg_stride is ", b.arg_stride)
                                           : cat("the bridge's slots hold ", room_for_args));
  }
  return Status::ok();
}

Status call_batch(Server &server, const BatchCall &b, bool *timed_out) {
  if (timed_out)
    *timed_out = false;
  const std::string subject = server.report().package.string();
  const size_t stride = server.report().slot_size;
  auto arg_len = [&](size_t i) -> size_t {
    return b.arg_lens.empty() ? b.arg_stride : b.arg_lens[i];
  };
  // Every request is checked before the first is sent: a batch is refused whole or sent whole.
  if (auto st = check_batch(server, b); !st)
    return st;
  const uint32_t inflight =
      std::max<uint32_t>(1, std::min<uint32_t>(b.inflight, server.report().num_slots));
  std::vector<uint8_t> frames(size_t{inflight} * stride);
  std::vector<const void *> frame_ptrs(inflight);
  std::vector<size_t> frame_sizes(inflight);
  std::vector<uint8_t> responses(size_t{inflight} * stride);
  std::vector<size_t> response_sizes(inflight);
  std::vector<bool> answered(b.count);
  size_t sent = 0, received = 0;
  std::optional<Clock::time_point> stalled_until;
  while (received < b.count) {
    const size_t room = std::min<size_t>(b.count - sent, inflight - (sent - received));
    if (room > 0) {
      for (size_t k = 0; k < room; ++k) {
        const size_t i = sent + k;
        const uint32_t id = b.first_request_id + static_cast<uint32_t>(i);
        const cudaq_rt_request_header h{CUDAQ_RT_REQUEST_MAGIC, b.function_id,
                                        static_cast<uint32_t>(arg_len(i)), id, id};
        uint8_t *f = frames.data() + k * stride;
        std::memcpy(f, &h, sizeof h);
        if (arg_len(i))
          std::memcpy(f + sizeof h, b.args + i * b.arg_stride, arg_len(i));
        frame_ptrs[k] = f;
        frame_sizes[k] = sizeof h + arg_len(i);
      }
      auto queued = server.send_batch(std::span(frame_ptrs.data(), room),
                                      std::span(frame_sizes.data(), room));
      if (!queued)
        return std::move(queued).take_error();
      sent += *queued;
    }
    const size_t outstanding = sent - received;
    if (outstanding == 0) { // the bridge took none, and none of ours is in flight: wait for room
      if (!stalled_until)
        stalled_until = Clock::now() + seconds(b.timeout_s);
      else if (Clock::now() >= *stalled_until)
        return make_error(subject, "no free slot in the bridge within ", b.timeout_s, " s");
      continue;
    }
    stalled_until.reset();
    auto taken =
        take_responses(server, responses, stride, response_sizes, outstanding, b.timeout_s);
    if (!taken) {
      if (timed_out) // not a kernel that ended: the deadline passed
        *timed_out = server.running();
      return std::move(taken).take_error();
    }
    for (size_t k = 0; k < *taken; ++k, ++received) {
      // The header read in place and the result copied once, to its row: nothing allocated per
      // answer (parse_response_frame's checks, without its vector).
      const uint8_t *frame = responses.data() + k * stride;
      const size_t size = response_sizes[k];
      cudaq_rt_response_header h{};
      if (size < sizeof h)
        return make_error(subject, "a response of ", size, " bytes is shorter than its ", sizeof h,
                          "-byte header");
      std::memcpy(&h, frame, sizeof h);
      if (h.magic != CUDAQ_RT_RESPONSE_MAGIC || h.result_len > size - sizeof h)
        return make_error(subject, "a response that is not one (magic ", hex(h.magic),
                          ", result_len ", h.result_len, " in ", size, " bytes)");
      const size_t i = h.request_id - b.first_request_id;
      if (i >= b.count || i >= sent || answered[i])
        return make_error(subject, "an answer to request ", h.request_id,
                          ", which this batch did not send or had answered already");
      if (h.result_len > b.result_stride)
        return make_error(subject, "request ", i, "'s result is ", h.result_len,
                          " bytes, more than the result_stride of ", b.result_stride);
      answered[i] = true;
      if (h.result_len)
        std::memcpy(b.results + i * b.result_stride, frame + sizeof h, h.result_len);
      b.result_lens[i] = h.result_len;
      b.statuses[i] = h.status;
    }
  }
  return Status::ok();
}

} // namespace cudaq_rt
