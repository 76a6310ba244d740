//! A PM QoS CPU latency request (`/dev/cpu_dma_latency`), held for as long
//! as a [`CpuLatency`] lives: the kernel keeps every CPU out of idle states
//! that take longer than the request to leave, as cyclictest and tuned's
//! latency profiles ask. 0 keeps idle CPUs polling instead of halting.
//!
//! Why a prober wants it: at a 10 ms interval, a CPU (or a virtual CPU)
//! sleeps between probes, and each round trip then runs the kernel's send
//! and receive paths cold. On this project's 2-vCPU VM, ICMP at 10 ms came
//! out at 19-38 µs p50 with an idle CPU and 8.4-9.1 µs with a request of 0
//! (BENCHMARKS.md), with the process's own CPU unchanged. The price is the
//! idle CPUs' power (on a VM, the host keeps the vCPU running): the CPU time
//! stays free for other tasks, but the CPUs no longer sleep.

use std::fs::File;
use std::io::{self, Read as _, Write as _};
use std::time::Duration;

/// The kernel's PM QoS interface for CPU latency.
const PATH: &str = "/dev/cpu_dma_latency";

/// A held request; dropping it withdraws it.
#[derive(Debug)]
pub struct CpuLatency {
    /// The kernel keeps the request while this file stays open.
    _file: File,
    /// What the kernel was asked for: whole µs.
    held: Duration,
}

/// Why a request could not be made.
#[derive(Debug, thiserror::Error)]
pub enum CpuLatencyError {
    /// More than the kernel's request can say (`i32` µs).
    #[error("{0:?} is more than a CPU latency request can hold (2,147 s)")]
    TooLong(Duration),
    /// The device could not be opened or written.
    #[error("cannot request a CPU latency of {latency:?} at {PATH}: {source}{hint}")]
    Device {
        /// What was asked for.
        latency: Duration,
        /// The kernel's answer.
        source: io::Error,
        /// What to do about it, where there is something.
        hint: &'static str,
    },
}

impl CpuLatency {
    /// Asks the kernel to keep CPUs out of idle states that take longer
    /// than `latency` (µs resolution, rounded down) to leave.
    ///
    /// # Errors
    /// `latency` beyond the kernel's range, or the device missing or not
    /// writable (it takes root or write access to it).
    pub fn request(latency: Duration) -> Result<Self, CpuLatencyError> {
        let us =
            i32::try_from(latency.as_micros()).map_err(|_| CpuLatencyError::TooLong(latency))?;
        let device = |source: io::Error| {
            let hint = match source.kind() {
                io::ErrorKind::PermissionDenied => {
                    " (it takes root, or write access to the device)"
                }
                io::ErrorKind::NotFound => " (this kernel has no PM QoS device)",
                _ => "",
            };
            CpuLatencyError::Device {
                latency,
                source,
                hint,
            }
        };
        let mut file = File::options().write(true).open(PATH).map_err(device)?;
        // Four bytes are read as a binary i32; any other length as hex text.
        file.write_all(&us.to_ne_bytes()).map_err(device)?;
        Ok(Self {
            _file: file,
            held: Duration::from_micros(us.unsigned_abs().into()),
        })
    }

    /// The latency asked for, as the kernel holds it (whole µs).
    pub fn latency(&self) -> Duration {
        self.held
    }

    /// The latency the kernel holds the CPUs to now: the tightest of all
    /// requests, or its default (2,000 s) when there is none.
    ///
    /// # Errors
    /// The device missing or not readable.
    pub fn current() -> io::Result<Duration> {
        let mut value = [0u8; 4];
        File::open(PATH)?.read_exact(&mut value)?;
        Ok(Duration::from_micros(
            u64::try_from(i32::from_ne_bytes(value)).unwrap_or(0),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_holds_while_it_lives_and_goes_with_it() {
        let root = std::fs::read_to_string("/proc/self/status")
            .unwrap()
            .lines()
            .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"));
        match CpuLatency::request(Duration::from_micros(0)) {
            Ok(held) => {
                assert_eq!(CpuLatency::current().unwrap(), Duration::ZERO);
                drop(held);
                // Back to the others' tightest or the default: not 0,
                // unless another process on this machine asked for 0.
                let after = CpuLatency::current().unwrap();
                assert!(
                    after > Duration::ZERO,
                    "the request stayed after its drop: {after:?}"
                );
            }
            Err(CpuLatencyError::Device { source, hint, .. })
                if source.kind() == io::ErrorKind::NotFound =>
            {
                assert!(!std::path::Path::new(PATH).exists());
                assert!(hint.contains("no PM QoS device"), "{hint}");
            }
            Err(CpuLatencyError::Device { source, hint, .. }) if !root => {
                assert_eq!(source.kind(), io::ErrorKind::PermissionDenied);
                assert!(hint.contains("root"), "{hint}");
            }
            Err(e) => panic!("as root: {e}"),
        }
    }

    #[test]
    fn too_long_a_request_is_refused_before_the_device() {
        let e = CpuLatency::request(Duration::from_secs(3_000)).unwrap_err();
        assert!(matches!(e, CpuLatencyError::TooLong(_)), "{e}");
        assert!(e.to_string().contains("2,147 s"), "{e}");
    }
}
