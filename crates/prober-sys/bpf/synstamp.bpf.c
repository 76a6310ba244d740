// SPDX-License-Identifier: GPL-2.0 OR MIT
//
// prober's TCP handshake stamper: on a device's tcx hooks, stamps the SYN
// a probe sends and the SYN-ACK that answers it, for the local ports of
// connections to the remote ports `ports` counts. See
// crates/prober-sys/src/synbpf.rs for why, and bpf/build.sh for how this is
// built (clang -target bpf) into the object committed beside it.
//
// IPv4 without options (Linux sends SYNs without) or IPv6 with TCP right
// after the fixed header; anything else passes untouched. It never changes
// or drops a packet: it always returns TCX_NEXT.
//
// Written without kernel or libbpf headers, so the object depends only on
// the compiler: the few definitions it needs are below.

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;

#define SEC(name) __attribute__((section(name), used))
#define __uint(name, val) int (*name)[val]
#define __type(name, val) typeof(val) *name

#define BPF_MAP_TYPE_ARRAY 2
#define BPF_F_MMAPABLE (1U << 10)
#define TCX_NEXT -1

// The fields of struct __sk_buff this program reads, at their offsets.
struct __sk_buff {
	__u32 len;
	__u32 pkt_type;
	__u32 mark;
	__u32 queue_mapping;
	__u32 protocol;
	__u32 vlan_present;
	__u32 vlan_tci;
	__u32 vlan_proto;
	__u32 priority;
	__u32 ingress_ifindex;
	__u32 ifindex;
	__u32 tc_index;
	__u32 cb[5];
	__u32 hash;
	__u32 tc_classid;
	__u32 data;
	__u32 data_end;
};

static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static __u64 (*bpf_ktime_get_tai_ns)(void) = (void *)208;

// One slot per local port: the SYN's stamp, the SYN-ACK's (TAI ns), the
// peer's address (an IPv4 one in the first 4 bytes), the peer's port
// (network order), how many SYNs the handshake sent. 40 bytes; the
// reader in synbpf.rs reads it at these offsets.
struct slot {
	__u64 syn;
	__u64 syn_ack;
	__u64 addr[2];
	__u16 port;
	__u16 syns;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct slot);
} stamps SEC(".maps");

// How many targets watch each remote port (host order); a u64 per port so
// the mapping's values are 8 bytes apart, as an array's are.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, __u64);
} ports SEC(".maps");

// A SYN for a handshake still open this long after the first is a
// retransmission; after it, a new connection from the same port.
#define RETRANSMIT_WINDOW_NS 10000000000ULL

#define ETH_LEN 14
#define TCP_MIN 14 // through the flags byte

SEC("classifier")
int prober_syn(struct __sk_buff *skb)
{
	__u8 *data = (__u8 *)(long)skb->data;
	__u8 *end = (__u8 *)(long)skb->data_end;
	__u8 *tcp;
	int v6;

	if (skb->protocol == 0x0008) { // ETH_P_IP, network order
		if (data + ETH_LEN + 20 + TCP_MIN > end)
			return TCX_NEXT;
		if (data[ETH_LEN] != 0x45 || data[ETH_LEN + 9] != 6)
			return TCX_NEXT;
		// Fragment offset and MF (read little-endian).
		if (*(__u16 *)(data + ETH_LEN + 6) & 0xff1f)
			return TCX_NEXT;
		tcp = data + ETH_LEN + 20;
		v6 = 0;
	} else if (skb->protocol == 0xdd86) { // ETH_P_IPV6
		if (data + ETH_LEN + 40 + TCP_MIN > end)
			return TCX_NEXT;
		if (data[ETH_LEN + 6] != 6)
			return TCX_NEXT;
		tcp = data + ETH_LEN + 40;
		v6 = 1;
	} else {
		return TCX_NEXT;
	}

	// A SYN: local port = source, remote = destination; a SYN-ACK the
	// other way round.
	__u8 flags = tcp[13] & 0x12;
	__u16 src = *(__u16 *)tcp, dst = *(__u16 *)(tcp + 2);
	int syn_ack;
	__u16 local, remote;
	if (flags == 0x12) {
		syn_ack = 1;
		local = dst;
		remote = src;
	} else if (flags == 0x02) {
		syn_ack = 0;
		local = src;
		remote = dst;
	} else {
		return TCX_NEXT;
	}

	// A port some target probes?
	__u32 key = __builtin_bswap16(remote);
	__u64 *watched = bpf_map_lookup_elem(&ports, &key);
	if (!watched || !*(__u32 *)watched)
		return TCX_NEXT;

	// The peer's address: the destination of a SYN, the source of a
	// SYN-ACK, read back from before the TCP header.
	__u64 peer[2] = {0, 0};
	if (v6) {
		__u8 *a = syn_ack ? tcp - 32 : tcp - 16;
		peer[0] = *(__u64 *)a;
		peer[1] = *(__u64 *)(a + 8);
	} else {
		__u8 *a = syn_ack ? tcp - 8 : tcp - 4;
		peer[0] = *(__u32 *)a;
	}

	key = __builtin_bswap16(local);
	struct slot *s = bpf_map_lookup_elem(&stamps, &key);
	if (!s)
		return TCX_NEXT;
	__u64 now = bpf_ktime_get_tai_ns();

	if (s->addr[0] == peer[0] && s->addr[1] == peer[1] && s->port == remote) {
		if (syn_ack) {
			// The SYN-ACK of the slot's flow: its first one is stamped.
			if (s->syn_ack == 0)
				s->syn_ack = now;
			return TCX_NEXT;
		}
		// A SYN of the slot's flow: a retransmission while the handshake
		// is open and recent (counted), else a new connection.
		if (s->syn_ack == 0 && now - s->syn <= RETRANSMIT_WINDOW_NS) {
			s->syns += 1;
			return TCX_NEXT;
		}
	} else if (syn_ack) {
		// A SYN-ACK of a SYN this program did not see is left alone.
		return TCX_NEXT;
	}
	// A SYN takes the slot over.
	s->syn = now;
	s->syn_ack = 0;
	s->addr[0] = peer[0];
	s->addr[1] = peer[1];
	s->port = remote;
	s->syns = 1;
	return TCX_NEXT;
}

char LICENSE[] SEC("license") = "GPL";
