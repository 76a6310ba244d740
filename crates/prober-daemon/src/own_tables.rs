//! A job's protocol tables (`[job.http]`, `[job.dns]`, ...), read without
//! the daemon naming them: each protocol's crate defines its table's type
//! and its key (`prober_net::options::ProtocolOptions`), and
//! [`WithOwn`] sets the tables whose keys the registry lists aside while
//! the rest of the job is read by its derived, `deny_unknown_fields`
//! schema. The job's keys keep their positions in error messages: the
//! schema reads them through the file's own deserializer, which a
//! `#[serde(flatten)]` catch-all would replace with a buffered copy.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize as _;
use serde::de::{self, DeserializeSeed, Deserializer, IntoDeserializer, MapAccess, Visitor};

thread_local! {
    /// The protocol table keys of the config being parsed (set by
    /// [`with_keys`]): a serde `Deserialize` takes no context.
    static KEYS: RefCell<Vec<&'static str>> = const { RefCell::new(Vec::new()) };
}

/// Runs `parse` with `keys` as the protocol table keys.
pub(crate) fn with_keys<R>(keys: Vec<&'static str>, parse: impl FnOnce() -> R) -> R {
    let before = KEYS.with(|k| k.replace(keys));
    let out = parse();
    KEYS.with(|k| *k.borrow_mut() = before);
    out
}

fn is_key(key: &str) -> bool {
    KEYS.with(|k| k.borrow().contains(&key))
}

/// Protocol tables by key, each with where it starts in the file.
pub(crate) type Tables = BTreeMap<String, toml::Spanned<toml::Value>>;

/// A table read as `T`, with its protocol tables by key beside it.
#[derive(Debug, Default)]
pub(crate) struct WithOwn<T> {
    /// The rest of the table.
    pub(crate) inner: T,
    /// The protocol tables, with where each starts in the file.
    pub(crate) own: Tables,
}

impl<'de, T: de::Deserialize<'de>> de::Deserialize<'de> for WithOwn<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(WithOwnVisitor(PhantomData))
    }
}

struct WithOwnVisitor<T>(PhantomData<T>);

impl<'de, T: de::Deserialize<'de>> Visitor<'de> for WithOwnVisitor<T> {
    type Value = WithOwn<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a table")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        let own = RefCell::new(BTreeMap::new());
        let inner = T::deserialize(de::value::MapAccessDeserializer::new(SetAside {
            map,
            own: &own,
        }))?;
        Ok(WithOwn {
            inner,
            own: own.into_inner(),
        })
    }
}

/// The file's map with the protocol tables taken out as they come.
struct SetAside<'a, A> {
    map: A,
    own: &'a RefCell<Tables>,
}

/// A key: the schema's field, or a protocol table's key.
enum Key<K> {
    Field(K),
    Own(String),
}

/// Reads a key as the schema's seed would, unless it is a protocol
/// table's: inside the file's own key reading, so an unknown key's error
/// keeps its position. The schema's seed is taken only for its own keys.
struct KeySeed<'a, K>(&'a mut Option<K>);

impl<'de, K: DeserializeSeed<'de>> DeserializeSeed<'de> for KeySeed<'_, K> {
    type Value = Key<K::Value>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        let key = String::deserialize(d)?;
        if is_key(&key) {
            return Ok(Key::Own(key));
        }
        let seed = self
            .0
            .take()
            .ok_or_else(|| de::Error::custom("a key was read twice"))?;
        seed.deserialize(key.into_deserializer()).map(Key::Field)
    }
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for SetAside<'_, A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        let mut slot = Some(seed);
        loop {
            match self.map.next_key_seed(KeySeed(&mut slot))? {
                None => return Ok(None),
                Some(Key::Field(v)) => return Ok(Some(v)),
                Some(Key::Own(name)) => {
                    let table: toml::Spanned<toml::Value> = self.map.next_value()?;
                    self.own.borrow_mut().insert(name, table);
                }
            }
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        self.map.next_value_seed(seed)
    }
}
