/* udp_echo: a bare UDP echo server, the baseline of bench/udp_rtt.py. No GPU: it sends every
 * datagram back to its sender unchanged, in batches, with the UDP bridge's socket options
 * (bridges/udp/udp_host.cpp: 4 MiB buffers, SO_RXQ_OVFL, recvmmsg/sendmmsg of up to 64) and its
 * default wait=spin (recvmmsg with MSG_DONTWAIT in a loop), so that the difference between the two
 * is the GPU's part.
 *
 *   udp_echo PORT [spin|block]      prints "echo on 127.0.0.1:PORT", serves until SIGTERM/SIGINT
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define BATCH 64
#define SLOT 65536 /* any datagram (bench/udp_rtt.py --sizes goes to 16 KB) */

static volatile sig_atomic_t stop;

static void on_signal(int sig) {
  (void)sig;
  stop = 1;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: udp_echo PORT [spin|block]\n");
    return 2;
  }
  const int spin = argc < 3 || strcmp(argv[2], "block") != 0;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);

  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  const int buffer = 4 << 20, on = 1;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buffer, sizeof buffer);
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buffer, sizeof buffer);
  setsockopt(fd, SOL_SOCKET, SO_RXQ_OVFL, &on, sizeof on);
  const struct timeval timeout = {0, 20000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  struct sockaddr_in addr;
  memset(&addr, 0, sizeof addr);
  addr.sin_family = AF_INET;
  addr.sin_port = htons((unsigned short)atoi(argv[1]));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  if (bind(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
    perror("udp_echo: bind");
    return 1;
  }
  socklen_t len = sizeof addr;
  getsockname(fd, (struct sockaddr *)&addr, &len);
  printf("echo on 127.0.0.1:%d\n", ntohs(addr.sin_port));
  fflush(stdout);

  static unsigned char buffers[BATCH][SLOT];
  static char control[BATCH][CMSG_SPACE(sizeof(unsigned))];
  struct mmsghdr msgs[BATCH];
  struct iovec iov[BATCH];
  struct sockaddr_storage from[BATCH];
  while (!stop) {
    for (int i = 0; i < BATCH; ++i) {
      iov[i].iov_base = buffers[i];
      iov[i].iov_len = SLOT;
      memset(&msgs[i], 0, sizeof msgs[i]);
      msgs[i].msg_hdr.msg_name = &from[i];
      msgs[i].msg_hdr.msg_namelen = sizeof from[i];
      msgs[i].msg_hdr.msg_iov = &iov[i];
      msgs[i].msg_hdr.msg_iovlen = 1;
      msgs[i].msg_hdr.msg_control = control[i];
      msgs[i].msg_hdr.msg_controllen = sizeof control[i];
    }
    int n = recvmmsg(fd, msgs, BATCH, spin ? MSG_DONTWAIT : MSG_WAITFORONE, NULL);
    if (n <= 0)
      continue;
    for (int i = 0; i < n; ++i) {
      iov[i].iov_len = msgs[i].msg_len;
      msgs[i].msg_hdr.msg_control = NULL;
      msgs[i].msg_hdr.msg_controllen = 0;
    }
    for (int done = 0; done < n;) {
      int rc = sendmmsg(fd, msgs + done, (unsigned)(n - done), 0);
      done += rc > 0 ? rc : 1;
    }
  }
  close(fd);
  return 0;
}
