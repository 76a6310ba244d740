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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_long_input_on_a_character_boundary() {
        assert_eq!(cap("short", 10), "short");
        assert_eq!(cap("µµµµ", 2), "µµ… (2 more characters)");
        assert_eq!(short(&"x".repeat(50_000_000)).len(), MAX_QUOTE + 30);
    }
}
