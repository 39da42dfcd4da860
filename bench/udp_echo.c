/* udp_echo: a bare UDP echo server, the baseline of bench/udp_rtt.py. No GPU: it sends every
 * datagram back to its sender unchanged, in batches, with the UDP bridge's socket options
 * (bridges/udp/udp_host.cpp: 4 MiB buffers, SO_RXQ_OVFL, recvmmsg/sendmmsg of up to 64) and its
 * default wait=spin (recvmmsg with MSG_DONTWAIT in a loop), so that the difference between the two
 * is the GPU's part.
 *
 * `handoff` serves as the bridge's two threads do with no GPU between them: a receiving thread
 * takes the datagrams and hands them, through a ring of buffers in memory, to a sending thread
 * that polls the ring and sends them back; both spin. Against `spin` (one thread receives and
 * sends) it measures what the hand-over from one thread (and core) to another costs.
 *
 * `uring` serves through io_uring with a kernel submission thread (IORING_SETUP_SQPOLL): a receive
 * is kept armed in every buffer, and the one thread spins on the completion queue and writes the
 * sends into the submission queue, both in memory: no syscall per datagram while the kernel's
 * thread is awake. Against `spin` it measures what a receive without syscalls buys (or costs: the
 * datagram is taken and the answer sent by the kernel's thread, on another CPU).
 *
 *   udp_echo PORT [spin|block|handoff|uring]   prints "echo on 127.0.0.1:PORT", serves until SIGTERM
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/io_uring.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#define BATCH 64
#define SLOT 65536 /* any datagram (bench/udp_rtt.py --sizes goes to 16 KB) */

static volatile sig_atomic_t stop;

static unsigned char buffers[BATCH][SLOT];
static char control[BATCH][CMSG_SPACE(sizeof(unsigned))];

/* Sets up message `m` to receive a datagram into buffers[b] (and its control data), the sender's
 * address into `from`. */
static void receive_into(struct mmsghdr *m, struct iovec *iov, unsigned b,
                         struct sockaddr_storage *from) {
  iov->iov_base = buffers[b];
  iov->iov_len = SLOT;
  memset(m, 0, sizeof *m);
  m->msg_hdr.msg_name = from;
  m->msg_hdr.msg_namelen = sizeof *from;
  m->msg_hdr.msg_iov = iov;
  m->msg_hdr.msg_iovlen = 1;
  m->msg_hdr.msg_control = control[b];
  m->msg_hdr.msg_controllen = sizeof control[b];
}

/* handoff: the receiving thread fills buffers in ring order (datagram k in buffers[k % BATCH]) and
 * publishes `taken`; the sending thread sends what lies between `sent` and `taken`, then publishes
 * `sent`, which frees those buffers. */
static _Atomic unsigned long taken, sent;
static struct sockaddr_storage senders[BATCH];
static socklen_t sender_lengths[BATCH];
static unsigned lengths[BATCH];

static void *send_loop(void *arg) {
  const int fd = *(const int *)arg;
  struct mmsghdr msgs[BATCH];
  struct iovec iov[BATCH];
  unsigned long done = 0;
  while (!stop) {
    const unsigned long ready = atomic_load_explicit(&taken, memory_order_acquire);
    if (ready == done)
      continue;
    unsigned n = 0;
    for (unsigned long k = done; k != ready; ++k, ++n) {
      const unsigned b = (unsigned)(k % BATCH);
      iov[n].iov_base = buffers[b];
      iov[n].iov_len = lengths[b];
      memset(&msgs[n], 0, sizeof msgs[n]);
      msgs[n].msg_hdr.msg_name = &senders[b];
      msgs[n].msg_hdr.msg_namelen = sender_lengths[b];
      msgs[n].msg_hdr.msg_iov = &iov[n];
      msgs[n].msg_hdr.msg_iovlen = 1;
    }
    for (unsigned i = 0; i < n;) {
      int rc = sendmmsg(fd, msgs + i, n - i, 0);
      i += rc > 0 ? (unsigned)rc : 1;
    }
    done = ready;
    atomic_store_explicit(&sent, done, memory_order_release);
  }
  return NULL;
}

static void receive_loop(int fd) {
  struct mmsghdr msgs[BATCH];
  struct iovec iov[BATCH];
  unsigned long next = 0;
  while (!stop) {
    const unsigned free =
        BATCH - (unsigned)(next - atomic_load_explicit(&sent, memory_order_acquire));
    if (free == 0)
      continue;
    for (unsigned i = 0; i < free; ++i) {
      const unsigned b = (unsigned)((next + i) % BATCH);
      receive_into(&msgs[i], &iov[i], b, &senders[b]);
    }
    int n = recvmmsg(fd, msgs, free, MSG_DONTWAIT, NULL);
    if (n <= 0)
      continue;
    for (int i = 0; i < n; ++i) {
      const unsigned b = (unsigned)((next + (unsigned)i) % BATCH);
      lengths[b] = msgs[i].msg_len;
      sender_lengths[b] = msgs[i].msg_hdr.msg_namelen;
    }
    next += (unsigned)n;
    atomic_store_explicit(&taken, next, memory_order_release);
  }
}

/* uring: one io_uring with a kernel submission thread; the rings are reached in memory. */
struct uring {
  int fd;
  unsigned sq_entries, cq_entries;
  _Atomic unsigned *sq_head, *sq_tail, *sq_flags, *cq_head, *cq_tail;
  unsigned sq_mask, cq_mask, *sq_array;
  struct io_uring_sqe *sqes;
  struct io_uring_cqe *cqes;
};

static int uring_open(struct uring *u, unsigned entries) {
  struct io_uring_params p;
  memset(&p, 0, sizeof p);
  p.flags = IORING_SETUP_SQPOLL;
  p.sq_thread_idle = 2000; /* ms the kernel's thread spins before it sleeps */
  u->fd = (int)syscall(__NR_io_uring_setup, entries, &p);
  if (u->fd < 0)
    return -errno;
  if (!(p.features & IORING_FEAT_SINGLE_MMAP))
    return -ENOTSUP;
  size_t sq_size = p.sq_off.array + p.sq_entries * sizeof(unsigned);
  size_t cq_size = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
  size_t size = sq_size > cq_size ? sq_size : cq_size;
  unsigned char *rings = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, u->fd,
                              IORING_OFF_SQ_RING);
  if (rings == MAP_FAILED)
    return -errno;
  u->sqes = mmap(NULL, p.sq_entries * sizeof(struct io_uring_sqe), PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_POPULATE, u->fd, IORING_OFF_SQES);
  if (u->sqes == MAP_FAILED)
    return -errno;
  u->sq_entries = p.sq_entries;
  u->cq_entries = p.cq_entries;
  u->sq_head = (_Atomic unsigned *)(rings + p.sq_off.head);
  u->sq_tail = (_Atomic unsigned *)(rings + p.sq_off.tail);
  u->sq_flags = (_Atomic unsigned *)(rings + p.sq_off.flags);
  u->sq_mask = *(unsigned *)(rings + p.sq_off.ring_mask);
  u->sq_array = (unsigned *)(rings + p.sq_off.array);
  u->cq_head = (_Atomic unsigned *)(rings + p.cq_off.head);
  u->cq_tail = (_Atomic unsigned *)(rings + p.cq_off.tail);
  u->cq_mask = *(unsigned *)(rings + p.cq_off.ring_mask);
  u->cqes = (struct io_uring_cqe *)(rings + p.cq_off.cqes);
  return 0;
}

/* Queues one message operation (IORING_OP_RECVMSG or IORING_OP_SENDMSG) on `fd`; the caller makes
 * sure the submission queue has room (at most BATCH receives and BATCH sends are ever queued). */
static void uring_queue(struct uring *u, int op, int fd, struct msghdr *msg, unsigned long data) {
  const unsigned tail = atomic_load_explicit(u->sq_tail, memory_order_relaxed);
  const unsigned index = tail & u->sq_mask;
  struct io_uring_sqe *sqe = &u->sqes[index];
  memset(sqe, 0, sizeof *sqe);
  sqe->opcode = (unsigned char)op;
  sqe->fd = fd;
  sqe->addr = (unsigned long)msg;
  sqe->len = 1;
  sqe->user_data = data;
  u->sq_array[index] = index;
  atomic_store_explicit(u->sq_tail, tail + 1, memory_order_release);
}

/* Wakes the kernel's submission thread where it went to sleep. */
static void uring_kick(struct uring *u) {
  atomic_thread_fence(memory_order_seq_cst);
  if (atomic_load_explicit(u->sq_flags, memory_order_relaxed) & IORING_SQ_NEED_WAKEUP)
    syscall(__NR_io_uring_enter, u->fd, 0, 0, IORING_ENTER_SQ_WAKEUP, NULL, 0);
}

#define SENT_TAG (1ul << 32)

static int uring_loop(int fd) {
  struct uring u;
  const int rc = uring_open(&u, 2 * BATCH);
  if (rc < 0) {
    fprintf(stderr, "udp_echo: io_uring with a submission thread: %s\n", strerror(-rc));
    return 1;
  }
  static struct msghdr msgs[BATCH];
  static struct iovec iov[BATCH];
  static struct sockaddr_storage from[BATCH];
  for (unsigned b = 0; b < BATCH; ++b) {
    iov[b].iov_base = buffers[b];
    iov[b].iov_len = SLOT;
    memset(&msgs[b], 0, sizeof msgs[b]);
    msgs[b].msg_name = &from[b];
    msgs[b].msg_namelen = sizeof from[b];
    msgs[b].msg_iov = &iov[b];
    msgs[b].msg_iovlen = 1;
    uring_queue(&u, IORING_OP_RECVMSG, fd, &msgs[b], b);
  }
  uring_kick(&u);
  while (!stop) {
    unsigned head = atomic_load_explicit(u.cq_head, memory_order_relaxed);
    const unsigned tail = atomic_load_explicit(u.cq_tail, memory_order_acquire);
    if (head == tail)
      continue;
    for (; head != tail; ++head) {
      const struct io_uring_cqe *cqe = &u.cqes[head & u.cq_mask];
      const unsigned b = (unsigned)(cqe->user_data & 0xFFFFFFFFu);
      if (cqe->user_data & SENT_TAG || cqe->res < 0) {
        /* the answer left (or the receive failed): receive into the buffer again */
        iov[b].iov_len = SLOT;
        msgs[b].msg_namelen = sizeof from[b];
        uring_queue(&u, IORING_OP_RECVMSG, fd, &msgs[b], b);
      } else {
        iov[b].iov_len = (size_t)cqe->res;
        uring_queue(&u, IORING_OP_SENDMSG, fd, &msgs[b], b | SENT_TAG);
      }
    }
    atomic_store_explicit(u.cq_head, head, memory_order_release);
    uring_kick(&u);
  }
  close(u.fd);
  return 0;
}

static void on_signal(int sig) {
  (void)sig;
  stop = 1;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: udp_echo PORT [spin|block|handoff|uring]\n");
    return 2;
  }
  const char *mode = argc < 3 ? "spin" : argv[2];
  const int spin = strcmp(mode, "block") != 0, handoff = strcmp(mode, "handoff") == 0;
  const int uring = strcmp(mode, "uring") == 0;
  if (strcmp(mode, "spin") != 0 && strcmp(mode, "block") != 0 && !handoff && !uring) {
    fprintf(stderr, "udp_echo: the mode is spin, block, handoff or uring, got '%s'\n", mode);
    return 2;
  }
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

  if (uring) {
    const int status = uring_loop(fd);
    close(fd);
    return status;
  }
  if (handoff) {
    pthread_t sender;
    if (pthread_create(&sender, NULL, send_loop, &fd) != 0) {
      fprintf(stderr, "udp_echo: cannot start the sending thread\n");
      return 1;
    }
    receive_loop(fd);
    pthread_join(sender, NULL);
    close(fd);
    return 0;
  }
  struct mmsghdr msgs[BATCH];
  struct iovec iov[BATCH];
  struct sockaddr_storage from[BATCH];
  while (!stop) {
    for (int i = 0; i < BATCH; ++i)
      receive_into(&msgs[i], &iov[i], (unsigned)i, &from[i]);
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
