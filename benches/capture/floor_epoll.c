/*
 * floor_epoll.c: does a thread parked in epoll_wait on the socket (as a
 * multi-threaded tokio runtime has) move the ICMP kernel RTT away from the
 * capture's? (benches/capture/floor_epoll.sh)
 *
 * Sends COUNT raw ICMP echo requests to 127.0.0.1, INTERVAL_US apart, each
 * with a transmit software stamp (OPT_ID, OPT_TSONLY); reads the reply with
 * its receive stamp, then the transmit stamp from the error queue; prints
 * "seq t1k t4k t1" per probe (ns since the epoch). The payload carries
 * "PRBI" and the seq at prober's offsets, so excess.py matches it as the
 * capture test matches prober's packets.
 *
 * MODE 0: one thread. MODE 1: a second thread parked in epoll_wait on the
 * socket, as a tokio worker is: every stamp queued on the error queue, and
 * every send's write-space event, wakes it inside the send call.
 * MODE 2: no stamps.
 *
 * Usage: floor MODE COUNT INTERVAL_US   (root: raw socket)
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/epoll.h>
#include <netinet/in.h>
#include <netinet/ip_icmp.h>
#include <linux/net_tstamp.h>
#include <linux/errqueue.h>
#include <time.h>
#include <poll.h>
static int fd;
static int mode;
static void *waiter(void *a){ int ep=epoll_create1(0); struct epoll_event e={.events=EPOLLIN|EPOLLOUT|EPOLLET}; epoll_ctl(ep,EPOLL_CTL_ADD,fd,&e); struct epoll_event o[4]; for(;;) epoll_wait(ep,o,4,-1);
  return a; }
static unsigned short ck(void*b,int n){unsigned long s=0;unsigned short*p=b;for(;n>1;n-=2)s+=*p++;if(n)s+=*(unsigned char*)p;s=(s>>16)+(s&0xffff);s+=s>>16;return ~s;}
int main(int argc,char**argv){
  mode=atoi(argv[1]); int n=atoi(argv[2]); int us=atoi(argv[3]);
  fd=socket(AF_INET,SOCK_RAW,IPPROTO_ICMP);
  int v=SOF_TIMESTAMPING_TX_SOFTWARE|SOF_TIMESTAMPING_RX_SOFTWARE|SOF_TIMESTAMPING_SOFTWARE|SOF_TIMESTAMPING_OPT_ID|SOF_TIMESTAMPING_OPT_TSONLY;
  if(mode!=2) setsockopt(fd,SOL_SOCKET,SO_TIMESTAMPING,&v,sizeof v);
  pthread_t t; if(mode==1) pthread_create(&t,0,waiter,0);
  struct sockaddr_in d={.sin_family=AF_INET,.sin_addr.s_addr=htonl(0x7f000001)};
  for(int i=0;i<n;i++){
    char pkt[64]={0}; struct icmphdr*h=(void*)pkt; h->type=8; h->un.echo.id=htons(0x4242); h->un.echo.sequence=htons(i);
    memcpy(pkt+8,"PRBI",4); unsigned long long seq=__builtin_bswap64(i); memcpy(pkt+8+12,&seq,8); h->checksum=ck(pkt,64);
    struct timespec a; clock_gettime(CLOCK_REALTIME,&a); long long t1=a.tv_sec*1000000000LL+a.tv_nsec;
    sendto(fd,pkt,64,0,(void*)&d,sizeof d);
    // read reply
    long long t1k=0,t4k=0;
    for(;;){ char buf[256],ctl[512]; struct iovec io={buf,sizeof buf}; struct msghdr m={.msg_iov=&io,.msg_iovlen=1,.msg_control=ctl,.msg_controllen=sizeof ctl};
      int r=recvmsg(fd,&m,0); if(r<0)continue; int hl=(buf[0]&15)*4; struct icmphdr*rh=(void*)(buf+hl);
      if(rh->type!=0) continue;
      for(struct cmsghdr*c=CMSG_FIRSTHDR(&m);c;c=CMSG_NXTHDR(&m,c)) if(c->cmsg_level==SOL_SOCKET&&c->cmsg_type==SO_TIMESTAMPING){struct timespec*ts=(void*)CMSG_DATA(c); t4k=ts[0].tv_sec*1000000000LL+ts[0].tv_nsec;}
      break;}
    if(mode!=2) for(;;){ char ctl[512]; char b[64]; struct iovec io={b,sizeof b}; struct msghdr m={.msg_iov=&io,.msg_iovlen=1,.msg_control=ctl,.msg_controllen=sizeof ctl};
      int r=recvmsg(fd,&m,MSG_ERRQUEUE|MSG_DONTWAIT); if(r<0)break;
      for(struct cmsghdr*c=CMSG_FIRSTHDR(&m);c;c=CMSG_NXTHDR(&m,c)) if(c->cmsg_level==SOL_SOCKET&&c->cmsg_type==SO_TIMESTAMPING){struct timespec*ts=(void*)CMSG_DATA(c); t1k=ts[0].tv_sec*1000000000LL+ts[0].tv_nsec;}}
    printf("%d %lld %lld %lld\n",i,t1k,t4k,t1);
    usleep(us);
  }
}
