/* udp_rtt_client: one request at a time to a UDP server of cudaq-rt's wire format (or the bare
 * echo), round trip per request, from sendto to the matching answer. The client polls its socket
 * without sleeping (recv with MSG_DONTWAIT), so its own wake-up is not part of the measure.
 *
 *   udp_rtt_client HOST:PORT REQUESTS [PAYLOAD_BYTES]
 * prints one line: "n=N min=.. p50=.. p90=.. p99=.. max=.. us lost=L wrong=W"
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int compare(const void *a, const void *b) {
  const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* Nearest rank: the sample of rank ceil(p/100 * n). */
static double percentile_us(const uint64_t *sorted, long n, long p) {
  if (n == 0)
    return 0;
  long rank = (n * p + 99) / 100;
  if (rank < 1)
    rank = 1;
  return (double)sorted[rank - 1] / 1000.0;
}

static uint32_t fnv1a(const char *s) {
  uint32_t h = 2166136261u;
  for (; *s; ++s)
    h = (h ^ (uint8_t)*s) * 16777619u;
  return h;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: udp_rtt_client HOST:PORT REQUESTS [PAYLOAD_BYTES]\n");
    return 2;
  }
  char host[64];
  const char *colon = strrchr(argv[1], ':');
  if (!colon || colon - argv[1] >= (long)sizeof host) {
    fprintf(stderr, "udp_rtt_client: '%s' is not HOST:PORT\n", argv[1]);
    return 2;
  }
  memcpy(host, argv[1], (size_t)(colon - argv[1]));
  host[colon - argv[1]] = 0;
  const long n = atol(argv[2]);
  const uint32_t payload = argc > 3 ? (uint32_t)atoi(argv[3]) : 8;
  if (payload > 65507 - 24) { /* the largest UDP/IPv4 datagram, less the header */
    fprintf(stderr, "udp_rtt_client: a payload of %u bytes does not fit one datagram\n", payload);
    return 2;
  }
  const long warmup = n / 10 < 1000 ? 1000 : n / 10;

  struct sockaddr_in addr;
  memset(&addr, 0, sizeof addr);
  addr.sin_family = AF_INET;
  addr.sin_port = htons((unsigned short)atoi(colon + 1));
  inet_pton(AF_INET, host, &addr.sin_addr);
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  const int buffer = 4 << 20;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buffer, sizeof buffer);
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buffer, sizeof buffer);
  if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
    perror("udp_rtt_client: connect");
    return 1;
  }
  static unsigned char request[65536], response[65536];
  const uint32_t header[4] = {0x43555152u, fnv1a("echo"), payload, 0};
  memcpy(request, header, 16);
  memset(request + 16, 0, 8);
  for (uint32_t i = 0; i < payload; ++i)
    request[24 + i] = (unsigned char)i;
  uint64_t *rtt = malloc(sizeof(uint64_t) * (size_t)n);
  long lost = 0, wrong = 0, kept = 0;
  for (long i = 0; i < warmup + n; ++i) {
    const uint32_t id = (uint32_t)i;
    memcpy(request + 12, &id, 4);
    const uint64_t t0 = now_ns();
    if (send(fd, request, 24 + payload, 0) < 0) {
      perror("udp_rtt_client: send");
      return 1;
    }
    uint64_t t1 = 0;
    for (;;) {
      ssize_t got = recv(fd, response, sizeof response, MSG_DONTWAIT);
      t1 = now_ns();
      if (got >= 24) {
        uint32_t rid;
        memcpy(&rid, response + 12, 4);
        if (rid == id) {
          if (got != (ssize_t)(24 + payload) || memcmp(response + 24, request + 24, payload) != 0)
            ++wrong; /* the echo's answer is the request's payload */
          break;
        }
        continue; /* a late answer to an earlier (lost) request */
      }
      if (got >= 0)
        ++wrong;
      if (t1 - t0 > 1000000000u) { /* 1 s: lost */
        ++lost;
        t1 = 0;
        break;
      }
    }
    if (t1 && i >= warmup)
      rtt[kept++] = t1 - t0;
  }
  qsort(rtt, (size_t)kept, sizeof rtt[0], compare);
  printf("n=%ld min=%.2f p50=%.2f p90=%.2f p99=%.2f max=%.2f us lost=%ld wrong=%ld\n", kept,
         percentile_us(rtt, kept, 0), percentile_us(rtt, kept, 50), percentile_us(rtt, kept, 90),
         percentile_us(rtt, kept, 99), percentile_us(rtt, kept, 100), lost, wrong);
  free(rtt);
  close(fd);
  return 0;
}
