//! A protocol's own options, owned by its crate: one type that is both the
//! flags of `prober run` and `prober sweep` (clap) and a daemon job's
//! `[job.KEY]` table (serde), described once by a [`ProtocolOptions`] that
//! the protocol's descriptor points at ([`prober_core::Protocol::own`]).
//! The binary adds the flags, the daemon reads the tables, and both check
//! and hand them to the builders by looping over the registry: a new
//! protocol with options touches neither (ripgrep's one definition per
//! flag, vector's component that owns its config). A responder's own
//! settings are described the same way, pointed at by its descriptor
//! ([`prober_core::responder::Responder::own`]): `prober serve`'s flags and
//! the daemon's `[serve]` keys of the same names ([`ProtocolOptions::keys`]).

use std::any::Any;
use std::fmt;

use prober_core::shared::Shared;
use prober_core::{Registry, Target};

/// What a protocol's options do once read.
pub trait OwnOptions: Any + Send + Sync + fmt::Debug {
    /// Nothing was given: every field keeps its default.
    fn is_default(&self) -> bool;

    /// Checks them and puts what the protocol's builder reads into `store`
    /// ([`prober_core::protocol::BuildEnv::options`]); `size` is the
    /// request size given for the protocol's targets, where one was.
    ///
    /// # Errors
    /// A value the protocol cannot use, as one line that names it as the
    /// user wrote it: a flag (`--expect-rcode`) when `table` is `None`,
    /// else a key of `table` (`job.web.dns.expect_rcode`).
    fn put(&self, store: &Shared, size: Option<usize>, table: Option<&str>) -> Result<(), String>;

    /// Whether `other` is the same options (a reload keeps the schedules of
    /// a job whose options did not change).
    fn same(&self, other: &dyn OwnOptions) -> bool;

    /// Itself, to compare with another of its type.
    fn as_any(&self) -> &dyn Any;

    /// A copy.
    fn clone_box(&self) -> Box<dyn OwnOptions>;

    /// Makes the relative paths it names relative to `base` (a config
    /// file's directory), as every path of a config file is.
    fn rebase(&mut self, base: &std::path::Path);
}

/// Reads a protocol's options from parsed flags.
pub type FromMatches = fn(&clap::ArgMatches) -> Result<Box<dyn OwnOptions>, clap::Error>;

/// Reads a protocol's options from a job's table.
pub type FromToml = fn(toml::Value) -> Result<Box<dyn OwnOptions>, String>;

/// The description of one protocol's options.
pub struct ProtocolOptions {
    /// Its table in a daemon job (`[job.http]`).
    pub key: &'static str,
    /// Its flags, as messages name them.
    pub flags: &'static str,
    /// The targets that take them, as messages name them.
    pub targets: &'static str,
    /// The self-test honours them (ICMP's socket choice); otherwise the
    /// self-test makes its own targets and refuses them.
    pub self_test: bool,
    /// Adds the flags to a command.
    pub args: fn(clap::Command) -> clap::Command,
    /// Reads the flags back.
    pub from_matches: FromMatches,
    /// Reads a job's table.
    pub from_toml: FromToml,
    /// The options when nothing is given.
    pub default: fn() -> Box<dyn OwnOptions>,
}

impl fmt::Debug for ProtocolOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProtocolOptions")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

fn from_matches<T>(m: &clap::ArgMatches) -> Result<Box<dyn OwnOptions>, clap::Error>
where
    T: clap::FromArgMatches + OwnOptions,
{
    Ok(Box::new(T::from_arg_matches(m)?))
}

fn from_toml<T>(v: toml::Value) -> Result<Box<dyn OwnOptions>, String>
where
    T: serde::de::DeserializeOwned + OwnOptions,
{
    T::deserialize(v)
        .map(|t| Box::new(t) as Box<dyn OwnOptions>)
        .map_err(|e| e.message().to_owned())
}

fn default<T: Default + OwnOptions>() -> Box<dyn OwnOptions> {
    Box::new(T::default())
}

impl ProtocolOptions {
    /// The description of options type `T`, kept in `[job.KEY]`, taken by
    /// the targets of the protocols whose descriptors point at it.
    pub const fn of<T>(key: &'static str, flags: &'static str, targets: &'static str) -> Self
    where
        T: clap::Args + clap::FromArgMatches + serde::de::DeserializeOwned + Default + OwnOptions,
    {
        Self {
            key,
            flags,
            targets,
            self_test: false,
            args: T::augment_args,
            from_matches: from_matches::<T>,
            from_toml: from_toml::<T>,
            default: default::<T>,
        }
    }

    /// The same, honoured by the self-test.
    #[must_use]
    pub const fn in_self_test(mut self) -> Self {
        self.self_test = true;
        self
    }

    /// Whether target `t` takes these options.
    pub fn applies(&self, t: &Target) -> bool {
        self.taken_by(t.protocol)
    }

    /// Whether the targets of `p` take these options (its descriptor
    /// points at them).
    pub fn taken_by(&self, p: &prober_core::Protocol) -> bool {
        p.own
            .iter()
            .filter_map(|o| (*o as &dyn Any).downcast_ref::<Self>())
            .any(|o| std::ptr::eq(o, self))
    }

    /// The options of the registry's protocols, each once, in the
    /// registry's order.
    pub fn all(registry: &Registry) -> Vec<&'static Self> {
        let mut all: Vec<&'static Self> = Vec::new();
        for p in registry.protocols() {
            for own in p
                .own
                .iter()
                .filter_map(|o| (*o as &'static dyn Any).downcast_ref::<Self>())
            {
                if !all.iter().any(|o| std::ptr::eq(*o, own)) {
                    all.push(own);
                }
            }
        }
        all
    }
}

impl ProtocolOptions {
    /// The options `r`'s descriptor points at, if any.
    pub fn of_responder(r: &prober_core::responder::Responder) -> Option<&'static Self> {
        r.own
            .and_then(|o| (o as &'static dyn Any).downcast_ref::<Self>())
    }

    /// The options of the registry's responders, each once, in the
    /// registry's order (the flags of `prober serve`, the settings of the
    /// daemon's `[serve]`).
    pub fn served(registry: &Registry) -> Vec<&'static Self> {
        let mut all: Vec<&'static Self> = Vec::new();
        for own in registry.responders().filter_map(Self::of_responder) {
            if !all.iter().any(|o| std::ptr::eq(*o, own)) {
                all.push(own);
            }
        }
        all
    }

    /// The responders of `registry` that take these options.
    pub fn responders(
        &self,
        registry: &Registry,
    ) -> Vec<&'static prober_core::responder::Responder> {
        registry
            .responders()
            .filter(|r| Self::of_responder(r).is_some_and(|o| std::ptr::eq(o, self)))
            .collect()
    }

    /// The keys a config file may give for these options: their flags'
    /// names (`stamp_key` for `--stamp-key`), but for hidden ones (test
    /// impairments, command line only).
    pub fn keys(&self) -> Vec<String> {
        (self.args)(clap::Command::new("keys"))
            .get_arguments()
            .filter(|a| !a.is_hide_set() && a.get_long().is_some())
            .map(|a| a.get_id().to_string())
            .collect()
    }
}

/// Every protocol's options, as given (or their defaults).
#[derive(Debug, Default)]
pub struct OptionSet(pub Vec<(&'static ProtocolOptions, Box<dyn OwnOptions>)>);

impl Clone for OptionSet {
    fn clone(&self) -> Self {
        Self(self.0.iter().map(|(o, v)| (*o, v.clone_box())).collect())
    }
}

impl OptionSet {
    /// The registry's options read from parsed flags.
    ///
    /// # Errors
    /// A flag clap could not read into its type.
    pub fn from_matches(registry: &Registry, m: &clap::ArgMatches) -> Result<Self, clap::Error> {
        ProtocolOptions::all(registry)
            .into_iter()
            .map(|o| Ok((o, (o.from_matches)(m)?)))
            .collect::<Result<_, _>>()
            .map(Self)
    }

    /// The registry's responders' options read from parsed flags.
    ///
    /// # Errors
    /// A flag clap could not read into its type.
    pub fn served_from_matches(
        registry: &Registry,
        m: &clap::ArgMatches,
    ) -> Result<Self, clap::Error> {
        ProtocolOptions::served(registry)
            .into_iter()
            .map(|o| Ok((o, (o.from_matches)(m)?)))
            .collect::<Result<_, _>>()
            .map(Self)
    }

    /// The registry's responders' options, each its default.
    pub fn served_defaults(registry: &Registry) -> Self {
        Self(
            ProtocolOptions::served(registry)
                .into_iter()
                .map(|o| (o, (o.default)()))
                .collect(),
        )
    }

    /// The value given for `o`, if this set has one.
    pub fn get(&self, o: &ProtocolOptions) -> Option<&dyn OwnOptions> {
        self.0
            .iter()
            .find(|(p, _)| std::ptr::eq(*p, o))
            .map(|(_, v)| &**v)
    }

    /// Sets the value for `o` (replacing the one there was).
    pub fn set(&mut self, o: &'static ProtocolOptions, v: Box<dyn OwnOptions>) {
        self.0.retain(|(p, _)| !std::ptr::eq(*p, o));
        self.0.push((o, v));
    }

    /// Checks each and puts it in `store`; `size` applies to the protocols
    /// any of `targets` is of; `job` names a config's job (its tables are
    /// `JOB.KEY`), `None` the flags.
    ///
    /// # Errors
    /// The first one a protocol refuses.
    pub fn put<'t>(
        &self,
        store: &Shared,
        targets: impl Iterator<Item = &'t Target> + Clone,
        size: Option<usize>,
        job: Option<&str>,
    ) -> Result<(), String> {
        for (o, v) in &self.0 {
            let size = size.filter(|_| targets.clone().any(|t| o.applies(t)));
            let table = job.map(|j| format!("{j}.{}", o.key));
            v.put(store, size, table.as_deref())?;
        }
        Ok(())
    }

    /// Whether every protocol's options are the same as in `other`.
    pub fn same(&self, other: &Self) -> bool {
        self.0.len() == other.0.len()
            && self
                .0
                .iter()
                .zip(&other.0)
                .all(|((a, x), (b, y))| std::ptr::eq(*a, *b) && x.same(&**y))
    }
}

impl PartialEq for OptionSet {
    fn eq(&self, other: &Self) -> bool {
        self.same(other)
    }
}

/// Implements [`OwnOptions`] for a `Clone + PartialEq + Default` spec type
/// (its default: nothing given) with `put_into(&self, &Shared, Option<usize>,
/// Option<&str>) -> Result<(), String>`; with `rebase = f`, its
/// `f(&mut self, &Path)` makes its paths relative to a config's directory.
///
/// `own_options!(T, as_is)` is for settings the responder reads as they
/// are (every value usable): `put_into` puts a copy.
#[macro_export]
macro_rules! own_options {
    ($t:ty, as_is) => {
        impl $t {
            /// Puts a copy where the responder finds it: every value is
            /// usable.
            #[allow(clippy::unnecessary_wraps)]
            fn put_into(
                &self,
                store: &prober_core::shared::Shared,
                _size: Option<usize>,
                _table: Option<&str>,
            ) -> Result<(), String> {
                store.put(self.clone());
                Ok(())
            }
        }
        $crate::own_options!($t);
    };
    ($t:ty) => {
        $crate::own_options!($t, rebase = |_: &mut $t, _: &std::path::Path| {});
    };
    ($t:ty, rebase = $rebase:expr) => {
        impl $crate::options::OwnOptions for $t {
            fn is_default(&self) -> bool {
                *self == <$t as Default>::default()
            }

            fn put(
                &self,
                store: &prober_core::shared::Shared,
                size: Option<usize>,
                table: Option<&str>,
            ) -> Result<(), String> {
                self.put_into(store, size, table)
            }

            fn same(&self, other: &dyn $crate::options::OwnOptions) -> bool {
                other.as_any().downcast_ref::<$t>() == Some(self)
            }

            fn as_any(&self) -> &dyn std::any::Any {
                self
            }

            fn clone_box(&self) -> Box<dyn $crate::options::OwnOptions> {
                Box::new(self.clone())
            }

            fn rebase(&mut self, base: &std::path::Path) {
                ($rebase)(self, base);
            }
        }
    };
}
