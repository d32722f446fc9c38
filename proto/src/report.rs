//! How gpud's programs print an error: the message and then each cause, every text once.
//!
//! Error types here follow two conventions at once: many show their cause in their own message
//! (`cannot read config /x: No such file or directory`), and they also return it as their
//! `source()`, which `anyhow` and other reporters print again after a colon. Printing the
//! chain through [`chain`] keeps the first and skips every cause whose text is already shown,
//! so both conventions print each cause exactly once, whatever a type chose.

use std::error::Error;

/// `error` and its causes, joined with `: `, each cause left out when its text is already part
/// of what precedes it.
pub fn chain(error: &(dyn Error + 'static)) -> String {
    let mut out = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        let text = e.to_string();
        if !text.is_empty() && !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cause = e.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use std::fmt;
    use std::io;

    use super::*;

    /// Shows its cause in its message and returns it as its source.
    #[derive(Debug)]
    struct Showing(&'static str, io::Error);

    impl fmt::Display for Showing {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "{}: {}", self.0, self.1)
        }
    }

    impl Error for Showing {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(&self.1)
        }
    }

    /// Shows only its own message.
    #[derive(Debug)]
    struct Wrapping(&'static str, Showing);

    impl fmt::Display for Wrapping {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
    }

    impl Error for Wrapping {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(&self.1)
        }
    }

    fn not_found() -> io::Error {
        io::Error::from(io::ErrorKind::NotFound)
    }

    #[test]
    fn a_cause_shown_in_the_message_is_not_repeated() {
        let e = Showing("cannot read config /nope", not_found());
        let text = chain(&e);
        assert_eq!(text, format!("cannot read config /nope: {}", not_found()));
    }

    #[test]
    fn causes_not_shown_yet_are_appended_once_each() {
        let e = Wrapping("--config", Showing("cannot read config /nope", not_found()));
        let text = chain(&e);
        assert_eq!(
            text,
            format!("--config: cannot read config /nope: {}", not_found())
        );
        assert_eq!(text.matches(&not_found().to_string()).count(), 1, "{text}");
    }
}
