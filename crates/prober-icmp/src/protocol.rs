//! The descriptor of ICMP echo probes (see [`prober_core::Protocol`]).

use prober_core::protocol::{
    BuildEnv, BuildFuture, Options, ProbeSpec, Protocol, Rung, Scheme, SizeRule,
};
use prober_core::runnable;

use crate::packet::{DEFAULT_PAYLOAD, MAX_PAYLOAD, MIN_PAYLOAD};
use crate::{IcmpClient, IcmpProbe, SocketKind};

/// ICMP's own options: `prober run`'s and `prober sweep`'s flags (clap)
/// and a config table's keys (serde) from one type. The builder finds them
/// in [`BuildEnv::options`], or their defaults.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::Args, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IcmpSpec {
    /// ICMP socket: the unprivileged datagram socket, a raw socket, or the
    /// first of those that opens.
    #[arg(long = "icmp-socket", value_name = "ICMP_SOCKET", value_enum, default_value_t = SocketKind::Auto, help_heading = "Requests")]
    pub socket: SocketKind,
}

prober_net::own_options!(IcmpSpec);

/// ICMP's own options: `--icmp-socket` and a job's `[job.icmp]`; the
/// self-test honours them.
pub(crate) static ICMP_OPTIONS: prober_net::options::ProtocolOptions =
    prober_net::options::ProtocolOptions::of::<IcmpSpec>("icmp", "--icmp-socket", "icmp targets")
        .in_self_test();

impl IcmpSpec {
    /// Puts itself where the builder finds it (see
    /// [`prober_net::options::OwnOptions::put`]); it has nothing to check.
    ///
    /// # Errors
    /// None.
    pub fn put_into(
        &self,
        store: &prober_core::shared::Shared,
        _size: Option<usize>,
        _table: Option<&str>,
    ) -> Result<(), String> {
        store.put(*self);
        Ok(())
    }
}

fn build<'a>(spec: ProbeSpec<'a>, env: &'a BuildEnv) -> BuildFuture<'a> {
    Box::pin(async move {
        // One client, and so one socket per address family, for every ICMP
        // target built in this environment.
        let client = env.shared.get_or_try_init(|| {
            Ok::<_, std::convert::Infallible>(IcmpClient::with_options(
                env.options::<IcmpSpec>().socket,
                env.ttl,
                env.marks.clone(),
                env.busy_poll,
                env.tx_stamps,
            ))
        })?;
        Ok(runnable(
            IcmpProbe::new(&client, spec.addr.ip(), spec.size)?.with_receive(&env.receive),
        ))
    })
}

/// `icmp://host` and bare hosts: ICMP echo, like ping.
pub const ICMP: Protocol = Protocol {
    schemes: &[Scheme::plain("icmp")],
    port: None,
    default_port: false,
    path: None,
    size: Some(SizeRule {
        default: DEFAULT_PAYLOAD,
        min: MIN_PAYLOAD,
        max: MAX_PAYLOAD,
    }),
    size_unit: "payload",
    options: Options {
        ttl: true,
        busy_poll: true,
        marks: true,
        flows: false,
    },
    help: "ICMP echo, like ping",
    ladder: &[Rung {
        scheme: "icmp",
        label: "ICMP",
        over: None,
        rank: 0,
    }],
    turnaround: None,
    own: &[&ICMP_OPTIONS],
    self_test: &[prober_core::protocol::SelfTest {
        scheme: "icmp",
        responder: None,
        path: "",
    }],
    build,
};
