//! Kernel stamps for TCP handshakes from a small BPF program on the
//! interface's transmit (and receive) hook, the cheap alternative to
//! [`crate::syntap`]'s packet socket.
//!
//! Why: a packet socket makes the kernel clone every packet the host sends
//! and run its filter on every packet it sends or receives. That cost a
//! loopback `connect()` about 1.5 µs, more than the stamps' bound (3 % or
//! 0.5 µs) for `tcp-connect://`. This program runs only on the probed
//! interface, clones nothing and keeps its stamps in a shared array that
//! is read without a system call. Measured on loopback without prober's
//! runtime (`benches/src/bin/hookcost.rs`, 11 rounds rotating the order,
//! medians of 3,000 connects): no stamper 11,888 ns, this program
//! 12,158 ns (+300 ns), the packet socket 13,380 ns (+1,502 ns).
//!
//! Where it stamps: on the device's `tcx` egress hook, where the device
//! takes the SYN (next to the packet socket's outgoing copy), and on its
//! ingress hook, where the SYN-ACK arrives (after the packet sockets'
//! incoming copies). On loopback only the egress hook is attached: the
//! SYN-ACK's transmit there is its arrival, since loopback hands each
//! packet it sends to `netif_rx` in the same call. The clock is
//! `bpf_ktime_get_tai_ns`, the real-time clock plus the TAI offset (whole
//! seconds), so a stamp converts exactly to the wall clock the other
//! stamps use.
//!
//! Hand-assembled and loaded with the `bpf` system call because the BPF
//! crates load compiled ELF objects, and building one needs clang, which
//! this project's toolchain does not have. Needs `CAP_BPF` and
//! `CAP_NET_ADMIN` (root) and Linux 6.6 or later (`tcx`); without either
//! [`SynBpf::open`] fails and the caller falls back to the packet socket.

use std::collections::HashMap;
use std::io;
#[cfg(test)]
use std::net::SocketAddr;
use std::net::{IpAddr, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use nix::libc;

use crate::syntap::{Handshake, SynTap};

/// A BPF instruction, as `struct bpf_insn`.
#[derive(Debug, Clone, Copy)]
struct Insn {
    code: u8,
    regs: u8,
    off: i16,
    imm: i32,
}

// Instruction codes (linux/bpf.h, linux/bpf_common.h).
const MOV_K: u8 = 0xb7; // dst = imm (64 bit)
const MOV_X: u8 = 0xbf; // dst = src
const ADD_K: u8 = 0x07;
const SUB_X: u8 = 0x1f;
const AND_K: u8 = 0x57;
const TO_BE16: u8 = 0xdc; // dst = htobe(dst), imm = 16
const LDX_B: u8 = 0x71; // dst = *(u8 *)(src + off)
const LDX_H: u8 = 0x69;
const LDX_W: u8 = 0x61;
const LDX_DW: u8 = 0x79;
const STX_H: u8 = 0x6b; // *(u16 *)(dst + off) = src
const STX_W: u8 = 0x63;
const STX_DW: u8 = 0x7b;
const ST_H: u8 = 0x6a; // *(u16 *)(dst + off) = imm
const ST_DW: u8 = 0x7a;
const LD_DW_IMM: u8 = 0x18; // a 64-bit immediate over two instructions
const JA: u8 = 0x05;
const JEQ_K: u8 = 0x15;
const JNE_K: u8 = 0x55;
const JSET_K: u8 = 0x45;
const JNE_X: u8 = 0x5d;
const JGT_X: u8 = 0x2d;
const CALL: u8 = 0x85;
const EXIT: u8 = 0x95;
/// `src` of a `LD_DW_IMM` whose immediate is a map's file descriptor.
const PSEUDO_MAP_FD: u8 = 1;
// Helpers.
const MAP_LOOKUP_ELEM: i32 = 1;
const KTIME_GET_TAI_NS: i32 = 208;
// Registers.
const R0: u8 = 0;
const R1: u8 = 1;
const R2: u8 = 2;
const R3: u8 = 3;
const R4: u8 = 4;
const R5: u8 = 5;
const R6: u8 = 6;
const R7: u8 = 7;
const R8: u8 = 8;
const R9: u8 = 9;
const FP: u8 = 10;

/// An assembler with named forward and backward jump targets.
#[derive(Default)]
struct Asm {
    insns: Vec<Insn>,
    labels: HashMap<&'static str, usize>,
    jumps: Vec<(usize, &'static str)>,
}

impl Asm {
    fn op(&mut self, code: u8, dst: u8, src: u8, off: i16, imm: i32) {
        self.insns.push(Insn {
            code,
            regs: (src << 4) | dst,
            off,
            imm,
        });
    }
    fn jump(&mut self, code: u8, dst: u8, src: u8, imm: i32, to: &'static str) {
        self.jumps.push((self.insns.len(), to));
        self.op(code, dst, src, 0, imm);
    }
    fn label(&mut self, name: &'static str) {
        self.labels.insert(name, self.insns.len());
    }
    fn ld_u64(&mut self, dst: u8, src: u8, v: u64) {
        #[allow(clippy::cast_possible_truncation, clippy::cast_possible_wrap)]
        let (lo, hi) = (v as u32 as i32, (v >> 32) as u32 as i32);
        self.op(LD_DW_IMM, dst, src, 0, lo);
        self.op(0, 0, 0, 0, hi);
    }
    /// r0 = the value in `map` under the key at `fp + key`; to "out"
    /// where there is none.
    fn lookup_or_out(&mut self, map: RawFd, key: i32) {
        self.ld_u64(R1, PSEUDO_MAP_FD, u64::try_from(map).unwrap_or(0));
        self.op(MOV_X, R2, FP, 0, 0);
        self.op(ADD_K, R2, 0, 0, key);
        self.op(CALL, 0, 0, 0, MAP_LOOKUP_ELEM);
        self.jump(JEQ_K, R0, 0, 0, "out");
    }
    fn finish(mut self) -> Vec<Insn> {
        for (at, to) in self.jumps {
            let target = self.labels[to];
            self.insns[at].off = i16::try_from(target.cast_signed() - at.cast_signed() - 1)
                .expect("a program of fewer than 32,768 instructions");
        }
        self.insns
    }
}

/// Bytes of one slot of the stamps array, indexed by the local port:
/// the SYN's stamp (u64, TAI ns), the SYN-ACK's (u64), the peer's address
/// (16 bytes, an IPv4 one in the first 4), the peer's port (u16, network
/// order), how many SYNs the handshake sent (u16), 4 bytes of padding.
const SLOT: usize = 40;
const SLOTS: u32 = 65_536;
/// A SYN for a handshake still open this long after the first is a
/// retransmission; after it, a new connection from the same port.
const RETRANSMIT_WINDOW_NS: u64 = 10_000_000_000;

/// The program: for a SYN leaving this host to a port that `ports` counts
/// (its u32 entry, by port, is not 0), or a SYN-ACK coming from one,
/// stamps the slot of the local port in `stamps`. IPv4 without options
/// (Linux sends SYNs without) or IPv6 with TCP right after the fixed
/// header; anything else passes untouched. It never changes or drops a
/// packet: it always returns `TCX_NEXT`.
fn program(stamps: RawFd, ports: RawFd) -> Vec<Insn> {
    let mut a = Asm::default();
    // r2 = data, r3 = data_end, r4 = the packet's EtherType (network order).
    a.op(LDX_W, R2, R1, 76, 0);
    a.op(LDX_W, R3, R1, 80, 0);
    a.op(LDX_W, R4, R1, 16, 0);
    a.jump(JEQ_K, R4, 0, 0x0008, "v4");
    a.jump(JEQ_K, R4, 0, 0xdd86, "v6");
    a.jump(JA, 0, 0, 0, "out");

    // IPv4 after a 14-byte Ethernet header: the headers must be there.
    a.label("v4");
    a.op(MOV_X, R5, R2, 0, 0);
    a.op(ADD_K, R5, 0, 0, 14 + 20 + 14);
    a.jump(JGT_X, R5, R3, 0, "out");
    a.op(LDX_B, R4, R2, 14, 0); // version and header length
    a.jump(JNE_K, R4, 0, 0x45, "out");
    a.op(LDX_B, R4, R2, 14 + 9, 0); // protocol
    a.jump(JNE_K, R4, 0, 6, "out");
    a.op(LDX_H, R4, R2, 14 + 6, 0); // fragment offset (read little-endian)
    a.jump(JSET_K, R4, 0, 0xff1f, "out");
    a.op(MOV_X, R8, R2, 0, 0);
    a.op(ADD_K, R8, 0, 0, 14 + 20); // r8 = the TCP header
    a.op(MOV_K, R9, 0, 0, 4); // r9 = the IP version
    a.jump(JA, 0, 0, 0, "tcp");

    a.label("v6");
    a.op(MOV_X, R5, R2, 0, 0);
    a.op(ADD_K, R5, 0, 0, 14 + 40 + 14);
    a.jump(JGT_X, R5, R3, 0, "out");
    a.op(LDX_B, R4, R2, 14 + 6, 0); // next header
    a.jump(JNE_K, R4, 0, 6, "out");
    a.op(MOV_X, R8, R2, 0, 0);
    a.op(ADD_K, R8, 0, 0, 14 + 40);
    a.op(MOV_K, R9, 0, 0, 6);

    // r3 = source port, r5 = destination port (network order). r7 = 0 for
    // a SYN (local port = source, remote = destination), 1 for a SYN-ACK
    // (the other way round). On the stack: the local port (host order,
    // the slot's index) at fp-4, the remote port as the packet has it at
    // fp-8, and in host order (the index into `ports`) at fp-12.
    a.label("tcp");
    a.op(LDX_B, R4, R8, 13, 0);
    a.op(AND_K, R4, 0, 0, 0x12); // SYN and ACK
    a.op(LDX_H, R3, R8, 0, 0);
    a.op(LDX_H, R5, R8, 2, 0);
    a.jump(JEQ_K, R4, 0, 0x12, "syn_ack");
    a.jump(JNE_K, R4, 0, 0x02, "out");
    a.op(MOV_K, R7, 0, 0, 0);
    a.jump(JA, 0, 0, 0, "ports");
    a.label("syn_ack");
    a.op(MOV_K, R7, 0, 0, 1);
    a.op(MOV_X, R4, R3, 0, 0);
    a.op(MOV_X, R3, R5, 0, 0);
    a.op(MOV_X, R5, R4, 0, 0);
    a.label("ports");
    a.op(STX_W, FP, R5, -8, 0);
    a.op(TO_BE16, R5, 0, 0, 16);
    a.op(STX_W, FP, R5, -12, 0);
    a.op(TO_BE16, R3, 0, 0, 16);
    a.op(STX_W, FP, R3, -4, 0);
    // A port some target probes?
    a.lookup_or_out(ports, -12);
    a.op(LDX_W, R4, R0, 0, 0);
    a.jump(JEQ_K, R4, 0, 0, "out");

    // The peer's address (the destination of a SYN, the source of a
    // SYN-ACK) at fp-24, read back from the TCP header.
    a.op(ST_DW, FP, 0, -24, 0);
    a.op(ST_DW, FP, 0, -16, 0);
    a.jump(JEQ_K, R9, 0, 6, "peer6");
    a.jump(JEQ_K, R7, 0, 1, "src4");
    a.op(LDX_W, R4, R8, -4, 0);
    a.op(STX_W, FP, R4, -24, 0);
    a.jump(JA, 0, 0, 0, "slot");
    a.label("src4");
    a.op(LDX_W, R4, R8, -8, 0);
    a.op(STX_W, FP, R4, -24, 0);
    a.jump(JA, 0, 0, 0, "slot");
    a.label("peer6");
    a.jump(JEQ_K, R7, 0, 1, "src6");
    a.op(LDX_DW, R4, R8, -16, 0);
    a.op(STX_DW, FP, R4, -24, 0);
    a.op(LDX_DW, R4, R8, -8, 0);
    a.op(STX_DW, FP, R4, -16, 0);
    a.jump(JA, 0, 0, 0, "slot");
    a.label("src6");
    a.op(LDX_DW, R4, R8, -32, 0);
    a.op(STX_DW, FP, R4, -24, 0);
    a.op(LDX_DW, R4, R8, -24, 0);
    a.op(STX_DW, FP, R4, -16, 0);

    // r6 = the slot, r0 = now.
    a.label("slot");
    a.lookup_or_out(stamps, -4);
    a.op(MOV_X, R6, R0, 0, 0);
    a.op(CALL, 0, 0, 0, KTIME_GET_TAI_NS);
    // The same flow as the slot's: the peer's address and port.
    a.op(LDX_DW, R4, R6, 16, 0);
    a.op(LDX_DW, R5, FP, -24, 0);
    a.jump(JNE_X, R4, R5, 0, "other");
    a.op(LDX_DW, R4, R6, 24, 0);
    a.op(LDX_DW, R5, FP, -16, 0);
    a.jump(JNE_X, R4, R5, 0, "other");
    a.op(LDX_H, R4, R6, 32, 0);
    a.op(LDX_H, R5, FP, -8, 0);
    a.jump(JNE_X, R4, R5, 0, "other");
    a.jump(JEQ_K, R7, 0, 1, "arrived");
    // A SYN of the slot's flow: a retransmission while the handshake is
    // open and recent (counted), else a new connection.
    a.op(LDX_DW, R4, R6, 8, 0);
    a.jump(JNE_K, R4, 0, 0, "other");
    a.op(LDX_DW, R4, R6, 0, 0);
    a.op(MOV_X, R5, R0, 0, 0);
    a.op(SUB_X, R5, R4, 0, 0);
    a.ld_u64(R4, 0, RETRANSMIT_WINDOW_NS);
    a.jump(JGT_X, R5, R4, 0, "other");
    a.op(LDX_H, R4, R6, 34, 0);
    a.op(ADD_K, R4, 0, 0, 1);
    a.op(STX_H, R6, R4, 34, 0);
    a.jump(JA, 0, 0, 0, "out");
    // The SYN-ACK of the slot's flow: its first one is stamped.
    a.label("arrived");
    a.op(LDX_DW, R4, R6, 8, 0);
    a.jump(JNE_K, R4, 0, 0, "out");
    a.op(STX_DW, R6, R0, 8, 0);
    a.jump(JA, 0, 0, 0, "out");
    // Another flow's slot: a SYN takes it over; a SYN-ACK of a SYN this
    // program did not see is left alone.
    a.label("other");
    a.jump(JEQ_K, R7, 0, 1, "out");
    a.op(STX_DW, R6, R0, 0, 0);
    a.op(ST_DW, R6, 0, 8, 0);
    a.op(LDX_DW, R4, FP, -24, 0);
    a.op(STX_DW, R6, R4, 16, 0);
    a.op(LDX_DW, R4, FP, -16, 0);
    a.op(STX_DW, R6, R4, 24, 0);
    a.op(LDX_H, R4, FP, -8, 0);
    a.op(STX_H, R6, R4, 32, 0);
    a.op(ST_H, R6, 0, 34, 1);

    a.label("out");
    a.op(MOV_K, R0, 0, 0, -1); // TCX_NEXT
    a.op(EXIT, 0, 0, 0, 0);
    a.finish()
}

// The `bpf` system call's commands and constants (linux/bpf.h).
const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_MAP_TYPE_ARRAY: u32 = 2;
const BPF_F_MMAPABLE: u32 = 1 << 10;
const BPF_PROG_TYPE_SCHED_CLS: u32 = 3;
const BPF_TCX_INGRESS: u32 = 46;
const BPF_TCX_EGRESS: u32 = 47;

/// `union bpf_attr`, written field by field at the offsets linux/bpf.h
/// gives them; unused fields stay 0, as the kernel requires.
struct Attr([u8; 128]);

impl Attr {
    fn new() -> Self {
        Self([0; 128])
    }
    fn u32(mut self, at: usize, v: u32) -> Self {
        self.0[at..at + 4].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn u64(mut self, at: usize, v: u64) -> Self {
        self.0[at..at + 8].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn bytes(mut self, at: usize, v: &[u8]) -> Self {
        self.0[at..at + v.len()].copy_from_slice(v);
        self
    }
    /// Runs `cmd`; its result is a new file descriptor.
    fn call(&mut self, cmd: libc::c_long) -> io::Result<OwnedFd> {
        #[allow(unsafe_code)]
        // SAFETY: the attribute is a 128-byte buffer that outlives the
        // call, its size is passed, and the pointers in it (instructions,
        // license, log) point into buffers the caller keeps alive.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                cmd,
                self.0.as_mut_ptr(),
                self.0.len() as libc::c_uint,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let fd = RawFd::try_from(fd).map_err(io::Error::other)?;
        #[allow(unsafe_code)]
        // SAFETY: the kernel returned a new descriptor that nothing else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }
}

/// Loads `prog` for the `attach` hook; a verifier's refusal comes back
/// with the verifier's last line.
fn load(prog: &[Insn], attach: u32) -> io::Result<OwnedFd> {
    let code: Vec<u8> = prog
        .iter()
        .flat_map(|i| {
            let mut b = [0u8; 8];
            b[0] = i.code;
            b[1] = i.regs;
            b[2..4].copy_from_slice(&i.off.to_ne_bytes());
            b[4..].copy_from_slice(&i.imm.to_ne_bytes());
            b
        })
        .collect();
    let license = b"GPL\0";
    let mut log = vec![0u8; 1 << 16];
    let attr = |level: u32, log: &mut Vec<u8>| {
        Attr::new()
            .u32(0, BPF_PROG_TYPE_SCHED_CLS)
            .u32(4, u32::try_from(prog.len()).unwrap_or(u32::MAX))
            .u64(8, code.as_ptr() as u64)
            .u64(16, license.as_ptr() as u64)
            .u32(24, level)
            .u32(
                28,
                if level > 0 {
                    u32::try_from(log.len()).unwrap_or(0)
                } else {
                    0
                },
            )
            .u64(
                32,
                if level > 0 {
                    log.as_mut_ptr() as u64
                } else {
                    0
                },
            )
            .bytes(48, b"prober_syn")
            .u32(68, attach)
    };
    match attr(0, &mut log).call(BPF_PROG_LOAD) {
        Err(e)
            if e.raw_os_error() == Some(libc::EINVAL) || e.raw_os_error() == Some(libc::EACCES) =>
        {
            // Once more with the verifier's log, for the message.
            let e2 = attr(1, &mut log).call(BPF_PROG_LOAD).err().unwrap_or(e);
            let text = String::from_utf8_lossy(&log);
            let last = text
                .trim_end_matches('\0')
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty() && !l.starts_with("processed "))
                .unwrap_or("")
                .to_owned();
            Err(io::Error::new(
                e2.kind(),
                format!("the kernel refused the program: {e2}: {last}"),
            ))
        }
        r => r,
    }
}

/// The interface traffic to `peer` leaves by, and whether it is loopback:
/// the one holding the source address the kernel picks for it (a UDP
/// socket's `connect` picks it and sends nothing).
fn interface_to(peer: IpAddr) -> io::Result<(u32, bool)> {
    let any: IpAddr = if peer.is_ipv4() {
        std::net::Ipv4Addr::UNSPECIFIED.into()
    } else {
        std::net::Ipv6Addr::UNSPECIFIED.into()
    };
    let udp = UdpSocket::bind((any, 0))?;
    udp.connect((peer, 9))?;
    let local = udp.local_addr()?.ip();
    let lo = |name: &str| nix::net::if_::if_nametoindex(name).map_err(io::Error::from);
    if peer.is_loopback() || local == peer {
        return Ok((lo("lo")?, true));
    }
    for ifa in nix::ifaddrs::getifaddrs().map_err(io::Error::from)? {
        let Some(addr) = ifa.address else { continue };
        let ip = addr
            .as_sockaddr_in()
            .map(|a| IpAddr::from(a.ip()))
            .or_else(|| addr.as_sockaddr_in6().map(|a| IpAddr::from(a.ip())));
        if ip == Some(local) {
            let loopback = ifa
                .flags
                .contains(nix::net::if_::InterfaceFlags::IFF_LOOPBACK);
            return Ok((lo(&ifa.interface_name)?, loopback));
        }
    }
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        format!("no interface holds {local}, the source address for {peer}"),
    ))
}

/// The program on one interface's hooks, the array it stamps and the ports
/// it watches: one per interface for the whole process, whatever number of
/// targets share it, so each packet runs one program. Detached when the
/// last [`SynBpf`] on the interface is dropped.
#[derive(Debug)]
struct Hook {
    ifindex: u32,
    stamps: memmap2::MmapRaw,
    /// A u32 per port, 8 bytes apart: how many [`SynBpf`]s watch it. Changed under
    /// [`HOOKS`]'s lock.
    ports: memmap2::MmapRaw,
    _links: Vec<OwnedFd>,
    _maps: [OwnedFd; 2],
}

/// The hooks this process has attached, by interface.
static HOOKS: std::sync::Mutex<Vec<std::sync::Weak<Hook>>> = std::sync::Mutex::new(Vec::new());

fn array(value_size: usize) -> io::Result<(OwnedFd, memmap2::MmapRaw)> {
    let map = Attr::new()
        .u32(0, BPF_MAP_TYPE_ARRAY)
        .u32(4, 4)
        .u32(8, u32::try_from(value_size).unwrap_or(0))
        .u32(12, SLOTS)
        .u32(16, BPF_F_MMAPABLE)
        .call(BPF_MAP_CREATE)?;
    let mem = memmap2::MmapOptions::new()
        .len(value_size * SLOTS as usize)
        .map_raw(map.as_raw_fd())?;
    Ok((map, mem))
}

impl Hook {
    fn attach(ifindex: u32, loopback: bool) -> io::Result<Self> {
        let (stamps_map, stamps) = array(SLOT)?;
        // An array's values are 8-byte aligned in its mapping: a u32 count
        // in each 8 bytes.
        let (ports_map, ports) = array(8)?;
        let prog = program(stamps_map.as_raw_fd(), ports_map.as_raw_fd());
        let hooks: &[u32] = if loopback {
            &[BPF_TCX_EGRESS]
        } else {
            &[BPF_TCX_EGRESS, BPF_TCX_INGRESS]
        };
        let mut links = Vec::new();
        for &hook in hooks {
            let fd = load(&prog, hook)?;
            links.push(
                Attr::new()
                    .u32(0, u32::try_from(fd.as_raw_fd()).unwrap_or(0))
                    .u32(4, ifindex)
                    .u32(8, hook)
                    .call(BPF_LINK_CREATE)?,
            );
        }
        Ok(Self {
            ifindex,
            stamps,
            ports,
            _links: links,
            _maps: [stamps_map, ports_map],
        })
    }

    /// Adds `by` to the count of `port` (under [`HOOKS`]'s lock).
    fn watch(&self, port: u16, by: i32) {
        #[allow(unsafe_code)]
        // SAFETY: the mapping holds SLOTS 8-byte values and lives as long
        // as self; any u16 port's is within it, aligned (the mapping is
        // page aligned). The program only reads it.
        unsafe {
            let p = self
                .ports
                .as_mut_ptr()
                .add(usize::from(port) * 8)
                .cast::<u32>();
            let n = std::ptr::read_volatile(p);
            std::ptr::write_volatile(p, n.saturating_add_signed(by));
        }
    }
}

/// Handshake stamps for one target (a remote port), from the program on
/// the interface its connections leave by; the port is unwatched when it
/// is dropped.
#[derive(Debug)]
pub struct SynBpf {
    hook: std::sync::Arc<Hook>,
    port: u16,
}

impl SynBpf {
    /// Stamps the handshakes to `port` on `peer` on the interface they
    /// leave by, attaching the program there unless this process already
    /// has.
    ///
    /// # Errors
    /// Without `CAP_BPF`/`CAP_NET_ADMIN` (`PermissionDenied`), on a kernel
    /// without `tcx` hooks (before 6.6), or when no interface holds the
    /// source address.
    pub fn open(peer: IpAddr, port: u16) -> io::Result<Self> {
        if port == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "port 0"));
        }
        let (ifindex, loopback) = interface_to(peer)?;
        let mut hooks = HOOKS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        hooks.retain(|h| h.strong_count() > 0);
        let hook = match hooks
            .iter()
            .filter_map(std::sync::Weak::upgrade)
            .find(|h| h.ifindex == ifindex)
        {
            Some(h) => h,
            None => {
                let h = std::sync::Arc::new(Hook::attach(ifindex, loopback)?);
                hooks.push(std::sync::Arc::downgrade(&h));
                h
            }
        };
        hook.watch(port, 1);
        Ok(Self { hook, port })
    }

    /// The stamps of the handshake from `local` port to `peer`, once
    /// `connect` returned, as ns since the Unix epoch; the slot is then
    /// cleared.
    pub fn take(&self, local: u16, peer: IpAddr) -> Handshake {
        let at = usize::from(local) * SLOT;
        #[allow(unsafe_code)]
        // SAFETY: the mapping is SLOT * SLOTS bytes and lives as long as
        // the hook; `at + SLOT` is within it for any u16 port, and `at + 32`
        // is 8-byte aligned. The program writes the slot from the kernel
        // while the handshake is on the wire: a volatile copy, after
        // `connect` returned, sees its writes.
        let slot = unsafe {
            let p = self.hook.stamps.as_mut_ptr().add(at);
            let slot = std::ptr::read_volatile(p.cast::<[u8; SLOT]>());
            // Clear the peer's port: the next SYN from this port starts
            // afresh even to the same peer.
            std::ptr::write_volatile(p.add(32).cast::<u16>(), 0);
            slot
        };
        let u64_at = |i: usize| u64::from_ne_bytes(slot[i..i + 8].try_into().unwrap_or_default());
        let mut addr = [0u8; 16];
        match peer {
            IpAddr::V4(a) => addr[..4].copy_from_slice(&a.octets()),
            IpAddr::V6(a) => addr.copy_from_slice(&a.octets()),
        }
        let rport = u16::from_be_bytes([slot[32], slot[33]]);
        let syns = u16::from_ne_bytes([slot[34], slot[35]]);
        if slot[16..32] != addr || rport != self.port {
            return Handshake::default();
        }
        let tai = tai_offset_ns();
        let wall = |t: u64| (t != 0).then(|| t.checked_sub(tai)).flatten();
        Handshake {
            syn_tx: if syns == 1 { wall(u64_at(0)) } else { None },
            syn_ack_rx: wall(u64_at(8)),
        }
    }
}

impl Drop for SynBpf {
    fn drop(&mut self) {
        let _hooks = HOOKS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.hook.watch(self.port, -1);
    }
}

/// Where a target's handshake stamps come from: the BPF program where
/// the kernel allows it (it costs a loopback connect about a fifth of what
/// a packet socket does), else a packet socket.
#[derive(Debug)]
pub enum Stamper {
    /// [`SynBpf`].
    Bpf(SynBpf),
    /// [`SynTap`].
    Packet(SynTap),
}

impl Stamper {
    /// The BPF program for handshakes to `addr`, else a packet socket.
    ///
    /// # Errors
    /// Neither could be opened (not root): both reasons, in one line.
    pub fn open(addr: std::net::SocketAddr) -> Result<Self, String> {
        let bpf = match SynBpf::open(addr.ip(), addr.port()) {
            Ok(b) => return Ok(Self::Bpf(b)),
            Err(e) => e,
        };
        tracing::debug!("handshake stamps from a packet socket: no BPF program ({bpf})");
        SynTap::open(addr.port()).map(Self::Packet).map_err(|e| {
            format!("no BPF program ({bpf}), no packet socket ({e}: it needs CAP_NET_RAW)")
        })
    }

    /// The stamps of the handshake from `local` port to `peer`, once
    /// `connect` returned.
    pub fn take(&self, local: u16, peer: IpAddr) -> Handshake {
        match self {
            Self::Bpf(b) => b.take(local, peer),
            Self::Packet(t) => t.take(local, peer),
        }
    }
}

/// CLOCK_TAI − CLOCK_REALTIME: whole seconds (0 unless a time daemon set
/// it), so the nearest second of two reads is exact.
fn tai_offset_ns() -> u64 {
    use nix::time::{ClockId, clock_gettime};
    let ns = |c| {
        clock_gettime(c)
            .map(|t| i128::from(t.tv_sec()) * 1_000_000_000 + i128::from(t.tv_nsec()))
            .unwrap_or(0)
    };
    let (real, tai) = (ns(ClockId::CLOCK_REALTIME), ns(ClockId::CLOCK_TAI));
    let secs = (tai - real + 500_000_000).div_euclid(1_000_000_000);
    u64::try_from(secs * 1_000_000_000).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jumps_resolve_forward_and_back() {
        let mut a = Asm::default();
        a.label("top");
        a.jump(JA, 0, 0, 0, "end");
        a.op(MOV_K, R0, 0, 0, 1);
        a.jump(JA, 0, 0, 0, "top");
        a.label("end");
        a.op(EXIT, 0, 0, 0, 0);
        let p = a.finish();
        assert_eq!(p[0].off, 2);
        assert_eq!(p[2].off, -3);
        assert_eq!(program(3, 4).last().map(|i| i.code), Some(EXIT));
    }

    /// Needs root (the tests run as root in CI) and Linux 6.6; skipped
    /// without either.
    #[test]
    fn stamps_a_loopback_handshake() {
        stamps_a_handshake("127.0.0.1:0");
        stamps_a_handshake("[::1]:0");
    }

    fn stamps_a_handshake(bind: &str) {
        let l = std::net::TcpListener::bind(bind).unwrap();
        let peer = l.local_addr().unwrap().ip();
        let port = l.local_addr().unwrap().port();
        let tap = match SynBpf::open(peer, port) {
            Ok(t) => t,
            Err(e) => {
                prober_core::testutil::skip(format_args!("{e}"));
                return;
            }
        };
        // Other traffic to other ports leaves no stamp.
        let other = std::net::TcpListener::bind(bind).unwrap();
        let o = std::net::TcpStream::connect(other.local_addr().unwrap()).unwrap();
        assert_eq!(
            tap.take(o.local_addr().unwrap().port(), peer),
            Handshake::default()
        );
        let t1 = prober_core::clock::unix_now_ns();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let t4 = prober_core::clock::unix_now_ns();
        let local = c.local_addr().unwrap().port();
        let h = tap.take(local, peer);
        let (tx, rx) = (
            h.syn_tx.expect("SYN stamp"),
            h.syn_ack_rx.expect("SYN-ACK stamp"),
        );
        assert!(t1 <= tx && tx <= rx && rx <= t4, "{t1} {tx} {rx} {t4}");
        // Taken once.
        assert_eq!(tap.take(local, peer), Handshake::default());
    }

    /// Two targets on one interface share its program; each port is
    /// stamped while one of them watches it.
    #[test]
    fn targets_share_one_program_per_interface() {
        let a = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let b = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let (pa, pb) = (a.local_addr().unwrap(), b.local_addr().unwrap());
        let Ok(ta) = SynBpf::open(pa.ip(), pa.port()) else {
            prober_core::testutil::skip("no BPF program");
            return;
        };
        let tb = SynBpf::open(pb.ip(), pb.port()).unwrap();
        assert!(std::sync::Arc::ptr_eq(&ta.hook, &tb.hook));
        let stamped = |t: &SynBpf, to: SocketAddr| {
            let c = std::net::TcpStream::connect(to).unwrap();
            t.take(c.local_addr().unwrap().port(), to.ip())
                .rtt()
                .is_some()
        };
        assert!(stamped(&ta, pa) && stamped(&tb, pb));
        // A's port is no longer watched once A is gone; B's still is.
        let hook = std::sync::Arc::clone(&ta.hook);
        drop(ta);
        let watching_a = SynBpf {
            hook,
            port: pa.port(),
        };
        assert!(
            !stamped(&watching_a, pa),
            "an unwatched port is not stamped"
        );
        std::mem::forget(watching_a); // it never counted itself in
        assert!(stamped(&tb, pb));
    }
}
