//! What a waiting command shows while gpud queues its request: on a terminal, one live line
//! on stderr (place in the queue, time waited) that disappears at the grant; in a pipe,
//! nothing, or with `-v` a plain line each time the place changes.

use std::io::Write;
use std::time::{Duration, Instant};

use crate::format::duration_ms;

/// The waiting display of one request.
pub struct Progress<W: Write> {
    out: W,
    started: Instant,
    place: Option<u32>,
    /// stderr is a terminal: draw the live line.
    live: bool,
    /// `-v`: plain lines when not live.
    verbose: bool,
    drawn: bool,
}

impl<W: Write> Progress<W> {
    /// A display writing to `out`, live when `out` is a terminal.
    pub fn new(out: W, live: bool, verbose: bool, started: Instant) -> Self {
        Self {
            out,
            started,
            place: None,
            live,
            verbose,
            drawn: false,
        }
    }

    /// The request's place changed.
    pub fn place(&mut self, place: u32, now: Instant) {
        self.place = Some(place);
        if self.live {
            self.draw(now);
        } else if self.verbose {
            let _ = writeln!(self.out, "gpudctl: {}", self.text(now));
        }
    }

    /// Time passed: the live line shows it.
    pub fn tick(&mut self, now: Instant) {
        if self.live {
            self.draw(now);
        }
    }

    /// The wait is over: the live line goes away. Returns how long it took.
    pub fn done(&mut self, now: Instant) -> Duration {
        if self.drawn {
            let _ = write!(self.out, "\r\x1b[K");
            let _ = self.out.flush();
            self.drawn = false;
        }
        now.saturating_duration_since(self.started)
    }

    fn text(&self, now: Instant) -> String {
        let waited = duration_ms(now.saturating_duration_since(self.started).as_millis() as u64);
        match self.place {
            Some(p) => format!("waiting for the lease: place {p} in the queue, waited {waited}"),
            None => format!("waiting for the lease, waited {waited}"),
        }
    }

    fn draw(&mut self, now: Instant) {
        let line = self.text(now);
        let _ = write!(self.out, "\r\x1b[Kgpudctl: {line}");
        let _ = self.out.flush();
        self.drawn = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(live: bool, verbose: bool) -> String {
        let start = Instant::now();
        let mut out = Vec::new();
        let mut p = Progress::new(&mut out, live, verbose, start);
        p.place(3, start + Duration::from_millis(10));
        p.tick(start + Duration::from_secs(2));
        p.place(1, start + Duration::from_secs(3));
        p.done(start + Duration::from_secs(4));
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn a_terminal_gets_a_live_line_that_is_cleared_at_the_end() {
        let text = run(true, false);
        assert!(
            text.starts_with("\r\x1b[Kgpudctl: waiting for the lease: place 3"),
            "{text:?}"
        );
        assert!(
            text.contains("place 1 in the queue, waited 3.0s"),
            "{text:?}"
        );
        assert!(text.contains("waited 2.0s"), "{text:?}");
        assert!(text.ends_with("\r\x1b[K"), "{text:?}");
        assert!(!text.contains('\n'), "{text:?}");
    }

    #[test]
    fn a_pipe_gets_nothing_or_with_verbose_plain_lines() {
        assert_eq!(run(false, false), "");
        let text = run(false, true);
        assert_eq!(
            text,
            "gpudctl: waiting for the lease: place 3 in the queue, waited 10ms\n\
             gpudctl: waiting for the lease: place 1 in the queue, waited 3.0s\n"
        );
    }
}
