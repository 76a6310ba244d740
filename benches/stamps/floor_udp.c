// The kernel's own price of a transmit stamp, without prober: a minimal UDP
// ping-pong over loopback (a forked echo server, a client with blocking
// reads), back to back, with or without SO_TIMESTAMPING transmit software
// stamps (OPT_ID | OPT_TSONLY, as prober asks for them). The client drains
// the stamp from the error queue after each reply, outside the timed part,
// so the difference is what the kernel spends on the stamp inside the send
// (loopback_xmit stamps the packet before handing it to the receive path).
//
//   cc -O2 -o floor_udp floor_udp.c && ./floor_udp PORT COUNT STAMPS
//
// Prints the p50 of the round trips in ns. Loopback only.
#include <arpa/inet.h>
#include <linux/errqueue.h>
#include <linux/net_tstamp.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000000000LL + t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
  long long x = *(const long long *)a, y = *(const long long *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s PORT COUNT STAMPS(0|1)\n", argv[0]);
    return 2;
  }
  int port = atoi(argv[1]), count = atoi(argv[2]), stamps = atoi(argv[3]);
  if (count <= 0 || count > 10000000) {
    fprintf(stderr, "COUNT must be 1..10000000\n");
    return 2;
  }
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(port)};
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int srv = socket(AF_INET, SOCK_DGRAM, 0);
  if (srv < 0 || bind(srv, (struct sockaddr *)&addr, sizeof addr) < 0) {
    perror("server socket");
    return 1;
  }
  pid_t child = fork();
  if (child == 0) {
    char buf[2048];
    struct sockaddr_in from;
    for (;;) {
      socklen_t len = sizeof from;
      ssize_t n = recvfrom(srv, buf, sizeof buf, 0, (struct sockaddr *)&from, &len);
      if (n > 0) sendto(srv, buf, n, 0, (struct sockaddr *)&from, len);
    }
  }
  close(srv);
  int c = socket(AF_INET, SOCK_DGRAM, 0);
  if (c < 0 || connect(c, (struct sockaddr *)&addr, sizeof addr) < 0) {
    perror("client socket");
    kill(child, SIGKILL);
    return 1;
  }
  if (stamps) {
    int flags = SOF_TIMESTAMPING_TX_SOFTWARE | SOF_TIMESTAMPING_SOFTWARE |
                SOF_TIMESTAMPING_OPT_ID | SOF_TIMESTAMPING_OPT_TSONLY;
    if (setsockopt(c, SOL_SOCKET, SO_TIMESTAMPING, &flags, sizeof flags) < 0) {
      perror("SO_TIMESTAMPING");
      kill(child, SIGKILL);
      return 1;
    }
  }
  struct timeval wait = {.tv_sec = 1};
  setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait);
  long long *rtt = malloc(sizeof(long long) * count);
  char msg[64] = {0}, reply[2048], control[256];
  int got = 0, stamped = 0;
  for (int i = 0; i < count; i++) {
    long long t1 = now_ns();
    if (send(c, msg, sizeof msg, 0) < 0) break;
    if (recv(c, reply, sizeof reply, 0) < 0) continue;
    rtt[got++] = now_ns() - t1;
    if (stamps) {
      struct msghdr m = {.msg_control = control, .msg_controllen = sizeof control};
      if (recvmsg(c, &m, MSG_ERRQUEUE | MSG_DONTWAIT) >= 0) stamped++;
    }
  }
  kill(child, SIGKILL);
  waitpid(child, NULL, 0);
  if (got == 0) {
    fprintf(stderr, "no replies\n");
    return 1;
  }
  qsort(rtt, got, sizeof rtt[0], cmp);
  printf("%lld\n", rtt[got / 2]);
  fprintf(stderr, "replies %d, stamps read %d\n", got, stamped);
  return 0;
}
