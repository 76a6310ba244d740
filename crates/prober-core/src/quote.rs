//! Quoting user input in messages without echoing all of it: a 50 MB
//! config line or target must not become a 50 MB log line.

/// The most characters of user input a message quotes.
pub const MAX_QUOTE: usize = 200;

/// `text` if it has at most `max` characters, else its first `max`
/// characters and `… (N more characters)`.
pub fn cap(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_owned(),
        Some((cut, _)) => {
            let more = text[cut..].chars().count();
            format!("{}… ({more} more characters)", &text[..cut])
        }
    }
}

/// [`cap`] at [`MAX_QUOTE`].
pub fn short(text: &str) -> String {
    cap(text, MAX_QUOTE)
}

/// `n` and a noun, plural unless `n` is 1: `1 job`, `2 jobs`, `0 charts`
/// (every noun prober counts this way takes an `s`).
pub fn count(n: impl Into<u64>, noun: &str) -> String {
    let n = n.into();
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_long_input_on_a_character_boundary() {
        assert_eq!(cap("short", 10), "short");
        assert_eq!(cap("µµµµ", 2), "µµ… (2 more characters)");
        assert_eq!(short(&"x".repeat(50_000_000)).len(), MAX_QUOTE + 30);
    }

    #[test]
    fn one_is_singular() {
        assert_eq!(count(1u64, "job"), "1 job");
        assert_eq!(count(0u64, "chart"), "0 charts");
        assert_eq!(count(12u64, "target"), "12 targets");
    }
}
