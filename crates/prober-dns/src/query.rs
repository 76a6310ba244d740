//! The question a target asks: `NAME[?type=A][&tcp]`.

use std::str::FromStr as _;

use hickory_proto::op::{Message, MessageType, OpCode, Query};
use hickory_proto::rr::{Name, RecordType};

/// A target path that does not name a question.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum QuestionError {
    /// No name after the server.
    #[error("no name to ask for: write dns://SERVER/NAME?type=A")]
    NoName,
    /// A name hickory cannot encode.
    #[error("name {0:?} is not a valid DNS name")]
    Name(String),
    /// A type that is not a record type.
    #[error("type {0:?} is not a DNS record type (A, AAAA, SRV, TXT, MX, NS, SOA, ...)")]
    Type(String),
    /// A query parameter prober does not know.
    #[error("unknown parameter {0:?}: dns targets take ?type=TYPE and &tcp")]
    Param(String),
}

/// What one target asks: a name and a type, over UDP or TCP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Question {
    /// The name asked for (fully qualified).
    pub name: Name,
    /// The record type.
    pub rtype: RecordType,
    /// Over TCP.
    pub tcp: bool,
}

impl Question {
    /// Parses the target's path: `example.com?type=AAAA&tcp`.
    ///
    /// # Errors
    /// [`QuestionError`].
    pub fn parse(path: &str) -> Result<Self, QuestionError> {
        let (name, query) = path.split_once('?').unwrap_or((path, ""));
        if name.is_empty() {
            return Err(QuestionError::NoName);
        }
        let mut name = Name::from_utf8(name).map_err(|_| QuestionError::Name(name.to_owned()))?;
        name.set_fqdn(true);
        let (mut rtype, mut tcp) = (RecordType::A, false);
        for kv in query.split('&').filter(|s| !s.is_empty()) {
            match kv.split_once('=') {
                Some(("type", t)) => {
                    rtype = RecordType::from_str(&t.to_ascii_uppercase())
                        .ok()
                        .filter(|t| !matches!(t, RecordType::Unknown(_)))
                        .ok_or_else(|| QuestionError::Type(t.to_owned()))?;
                }
                None if kv == "tcp" => tcp = true,
                Some(("tcp", "1" | "true")) => tcp = true,
                _ => return Err(QuestionError::Param(kv.to_owned())),
            }
        }
        Ok(Self { name, rtype, tcp })
    }

    /// The query message with this ID, as bytes.
    pub(crate) fn encode(&self, id: u16, recursion: bool) -> Vec<u8> {
        let mut m = Message::new(id, MessageType::Query, OpCode::Query);
        m.metadata.recursion_desired = recursion;
        m.add_query(Query::query(self.name.clone(), self.rtype));
        // A name and type that parsed always encode.
        m.to_vec().unwrap_or_default()
    }

    /// True when `reply` asks this question (a reply to another run's or
    /// another tool's query with the same ID does not).
    pub(crate) fn answers(&self, reply: &Message) -> bool {
        reply.queries.len() == 1
            && reply.queries[0].name() == &self.name
            && reply.queries[0].query_type() == self.rtype
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn questions_parse() {
        let q = Question::parse("example.com?type=aaaa&tcp").unwrap();
        assert_eq!(
            (q.name.to_string().as_str(), q.rtype, q.tcp),
            ("example.com.", RecordType::AAAA, true)
        );
        assert_eq!(Question::parse("a.b").unwrap().rtype, RecordType::A);
        assert!(matches!(Question::parse(""), Err(QuestionError::NoName)));
        assert!(matches!(
            Question::parse("x?type=BOGUS"),
            Err(QuestionError::Type(_))
        ));
        assert!(matches!(
            Question::parse("x?foo=1"),
            Err(QuestionError::Param(_))
        ));
        let bytes = Question::parse("a.b?type=MX").unwrap().encode(7, true);
        let m = Message::from_vec(&bytes).unwrap();
        assert_eq!(m.metadata.id, 7);
        assert!(Question::parse("a.b?type=MX").unwrap().answers(&m));
    }
}
