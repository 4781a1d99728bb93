//! A line-by-line SSE parser for the frames the gateway sends: `id`,
//! `event`, `data` (several lines joined), `retry` (handed out on its own,
//! the drain's reconnect hint) and `:` comments (keep-alives, skipped).

/// What the SSE parser hands out.
pub enum Parsed {
    Frame { id: Option<u64>, event: String, data: String },
    Retry(u64),
}

/// A line-by-line SSE parser (the fields the gateway sends: `id`, `event`,
/// `data`, `retry`, and `:` comments).
#[derive(Default)]
pub struct SseParser {
    buffer: Vec<u8>,
    id: Option<u64>,
    event: Option<String>,
    data: Vec<String>,
}

impl SseParser {
    pub fn push(&mut self, bytes: &[u8]) -> Vec<Parsed> {
        self.buffer.extend_from_slice(bytes);
        let mut out = Vec::new();
        while let Some(end) = self.buffer.iter().position(|b| *b == b'\n') {
            let raw: Vec<u8> = self.buffer.drain(..=end).collect();
            let line = String::from_utf8_lossy(&raw[..raw.len() - 1]);
            let line = line.strip_suffix('\r').unwrap_or(&line);
            if line.is_empty() {
                if !self.data.is_empty() || self.event.is_some() {
                    out.push(Parsed::Frame {
                        id: self.id.take(),
                        event: self.event.take().unwrap_or_else(|| "message".to_string()),
                        data: std::mem::take(&mut self.data).join("\n"),
                    });
                }
                self.id = None;
                continue;
            }
            if line.starts_with(':') {
                continue;
            }
            let (field, value) = line.split_once(':').unwrap_or((line, ""));
            let value = value.strip_prefix(' ').unwrap_or(value);
            match field {
                "id" => self.id = value.trim().parse().ok(),
                "event" => self.event = Some(value.to_string()),
                "data" => self.data.push(value.to_string()),
                "retry" => {
                    if let Ok(ms) = value.trim().parse() {
                        out.push(Parsed::Retry(ms));
                    }
                }
                _ => {}
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::{Parsed, SseParser};

    #[test]
    fn the_parser_reads_ids_events_multiline_data_retry_lines_and_skips_comments() {
        let mut parser = SseParser::default();
        let mut items = parser.push(b": heartbeat\n\nid: 3\nevent: text_delta\ndata: {\"a\":");
        items.extend(parser.push(b"\ndata: 1}\r\n\nretry: 250\nevent: reconnect\ndata: {}\n\n"));
        let mut frames = Vec::new();
        let mut retries = Vec::new();
        for item in items {
            match item {
                Parsed::Frame { id, event, data } => frames.push((id, event, data)),
                Parsed::Retry(ms) => retries.push(ms),
            }
        }
        assert_eq!(retries, vec![250]);
        assert_eq!(
            frames,
            vec![
                (Some(3), "text_delta".to_string(), "{\"a\":\n1}".to_string()),
                (None, "reconnect".to_string(), "{}".to_string()),
            ]
        );
    }
}
