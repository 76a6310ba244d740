//! The CSV sink: a header row and one row of summary fields per target.

use std::io::{self, Write};

use prober_core::{Context, Sample, Sink, Summary, TargetEntry};

use crate::fields::{FieldValue, field_value};

/// Writes the chosen summary fields as CSV (RFC 4180 quoting), times in µs,
/// percentages as plain numbers. Per-probe data is in the JSON sink.
pub struct CsvSink {
    out: crate::Records<Box<dyn crate::Destination>>,
    fields: Vec<String>,
}

impl std::fmt::Debug for CsvSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CsvSink")
            .field("fields", &self.fields)
            .finish_non_exhaustive()
    }
}

impl CsvSink {
    /// Writes to `out` with these columns.
    pub fn new(out: Box<dyn crate::Destination>, fields: Vec<String>) -> Self {
        Self {
            out: crate::Records::new(out),
            fields,
        }
    }
}

/// A CSV cell: quoted (with quotes doubled) when it holds a comma, quote or
/// line break.
pub(crate) fn quote(cell: &str) -> String {
    if cell.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", cell.replace('"', "\"\""))
    } else {
        cell.to_owned()
    }
}

impl Sink for CsvSink {
    fn record(&mut self, _cx: &Context<'_>, _t: &TargetEntry, _sample: &Sample) -> io::Result<()> {
        Ok(())
    }

    fn finish(&mut self, cx: &Context<'_>, summaries: &[Summary]) -> io::Result<()> {
        let header: Vec<String> = self.fields.iter().map(|f| quote(f)).collect();
        writeln!(self.out, "{}", header.join(","))?;
        for s in summaries {
            let row: Vec<String> = self
                .fields
                .iter()
                .map(|f| match field_value(f, s, cx.meta) {
                    Some(FieldValue::Text(t)) => quote(&t),
                    Some(FieldValue::Int(n)) => n.to_string(),
                    Some(FieldValue::Nanos(ns)) => format!("{:.3}", ns / 1e3),
                    Some(FieldValue::Percent(p)) => format!("{p:.3}"),
                    Some(FieldValue::Number(x)) => format!("{x:.3}"),
                    Some(FieldValue::Missing) | None => String::new(),
                })
                .collect();
            writeln!(self.out, "{}", row.join(","))?;
        }
        self.out.flush_all()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_only_when_needed() {
        assert_eq!(quote("tcp://h:1"), "tcp://h:1");
        assert_eq!(quote("a,b"), "\"a,b\"");
        assert_eq!(quote("say \"hi\""), "\"say \"\"hi\"\"\"");
    }
}
