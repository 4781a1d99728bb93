//! The `text/event-stream` parser (the WHATWG HTML standard's "event stream
//! interpretation"), reading into one [`Event`] whose strings are reused:
//! an upstream's token costs no allocation here once the buffers have
//! grown to its events' size.
//!
//! Lines end at `\n`, `\r\n` or `\r`; a line starting with `:` is a
//! comment; `field: value` loses one space after the colon; `data` lines
//! join with `\n`; a blank line dispatches the event when it has data; `id`
//! and `retry` are read and ignored (a model's answer is not resumed). A
//! leading byte-order mark is skipped.

/// One dispatched event: its type (`event:`, empty when none was given)
/// and its data lines joined.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Event {
    pub event: String,
    pub data: String,
}

/// The bytes of a line no upstream sends: more is a protocol error, not
/// memory to hold.
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

#[derive(Debug, PartialEq, Eq)]
pub enum ParseError {
    Utf8,
    LineTooLong,
}

/// The parser's state between chunks.
#[derive(Debug, Default)]
pub struct Reader {
    /// Bytes received and not yet read as whole lines.
    buf: Vec<u8>,
    /// Where the unread bytes of `buf` start.
    start: usize,
    /// The event being built (its data with a `\n` after each line).
    event: Event,
    has_data: bool,
    /// The stream's first bytes were looked at for a byte-order mark.
    past_bom: bool,
    /// The last line ended with `\r`: a `\n` first in the next bytes
    /// belongs to it.
    after_cr: bool,
}

impl Reader {
    /// Adds received bytes.
    pub fn feed(&mut self, bytes: &[u8]) {
        if self.start > 0 && self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete event in what was fed, if any, written into
    /// `out` (whose strings are reused).
    pub fn next_event(&mut self, out: &mut Event) -> Result<bool, ParseError> {
        loop {
            if !self.past_bom {
                let unread = &self.buf[self.start..];
                if unread.len() < 3 && b"\xEF\xBB\xBF".starts_with(unread) {
                    return Ok(false);
                }
                if unread.starts_with(b"\xEF\xBB\xBF") {
                    self.start += 3;
                }
                self.past_bom = true;
            }
            if self.after_cr && self.start < self.buf.len() {
                if self.buf[self.start] == b'\n' {
                    self.start += 1;
                }
                self.after_cr = false;
            }
            let unread = &self.buf[self.start..];
            let Some(end) = memchr::memchr2(b'\n', b'\r', unread) else {
                if unread.len() > MAX_LINE_BYTES {
                    return Err(ParseError::LineTooLong);
                }
                self.compact();
                return Ok(false);
            };
            self.after_cr = unread[end] == b'\r';
            let line = std::str::from_utf8(&unread[..end]).map_err(|_| ParseError::Utf8)?;
            let dispatched = apply(&mut self.event, &mut self.has_data, line, out);
            self.start += end + 1;
            if dispatched {
                return Ok(true);
            }
        }
    }

    /// Drops the bytes already read, keeping the partial line.
    fn compact(&mut self) {
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
    }
}

/// Applies one line; true when it dispatched an event into `out`.
fn apply(event: &mut Event, has_data: &mut bool, line: &str, out: &mut Event) -> bool {
    if line.is_empty() {
        let had_data = std::mem::take(has_data);
        if had_data {
            event.data.pop(); // the last line's `\n`
            std::mem::swap(out, event);
        }
        event.event.clear();
        event.data.clear();
        return had_data;
    }
    if line.starts_with(':') {
        return false;
    }
    let (field, value) = match line.split_once(':') {
        Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
        None => (line, ""),
    };
    match field {
        "data" => {
            event.data.push_str(value);
            event.data.push('\n');
            *has_data = true;
        }
        "event" => {
            event.event.clear();
            event.event.push_str(value);
        }
        _ => {} // id, retry, unknown fields
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every event in `chunks`, fed one after another.
    fn events(chunks: &[&[u8]]) -> Result<Vec<Event>, ParseError> {
        let (mut reader, mut out, mut all) = (Reader::default(), Event::default(), Vec::new());
        for chunk in chunks {
            reader.feed(chunk);
            while reader.next_event(&mut out)? {
                all.push(out.clone());
            }
        }
        Ok(all)
    }

    fn event(kind: &str, data: &str) -> Event {
        Event { event: kind.into(), data: data.into() }
    }

    #[test]
    fn data_lines_join_and_a_blank_line_dispatches() {
        let got = events(&[b"data: a\ndata:b\n\nevent: ping\ndata: {\"type\": \"ping\"}\n\n"]).unwrap();
        assert_eq!(got, vec![event("", "a\nb"), event("ping", "{\"type\": \"ping\"}")]);
    }

    #[test]
    fn comments_ids_retries_and_events_without_data_are_not_events() {
        let got = events(&[b": ping\n\nid: 7\nretry: 10\n\nevent: x\n\ndata: y\n\n"]).unwrap();
        // The event type of an event without data is reset with it.
        assert_eq!(got, vec![event("", "y")]);
    }

    #[test]
    fn every_line_ending_and_any_split_give_the_same_events() {
        let text = "\u{feff}data: one\r\n\r\nevent: e\rdata:  two\r\rdata\n\n";
        let whole = events(&[text.as_bytes()]).unwrap();
        assert_eq!(whole, vec![event("", "one"), event("e", " two"), event("", "")]);
        for split in 0..text.len() {
            let (a, b) = text.as_bytes().split_at(split);
            assert_eq!(events(&[a, b]).unwrap(), whole, "split at {split}");
        }
        let bytes: Vec<&[u8]> = text.as_bytes().chunks(1).collect();
        assert_eq!(events(&bytes).unwrap(), whole);
    }

    #[test]
    fn a_character_split_across_chunks_is_read_whole_and_invalid_utf8_is_an_error() {
        let text = "data: é€\n\n".as_bytes();
        assert_eq!(events(&[&text[..7], &text[7..]]).unwrap(), vec![event("", "é€")]);
        assert_eq!(events(&[b"data: \xff\n\n"]), Err(ParseError::Utf8));
    }

    #[test]
    fn an_unfinished_event_is_not_dispatched() {
        assert_eq!(events(&[b"data: partial\n"]).unwrap(), vec![]);
        assert_eq!(events(&[b"data: partial"]).unwrap(), vec![]);
    }
}
