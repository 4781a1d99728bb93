//! Being written.

use super::{Encoder, Frame, LogEvent};

#[derive(Default)]
pub struct LlmGatewayEncoder;

impl Encoder for LlmGatewayEncoder {
    fn encode(&mut self, _event: &LogEvent) -> Vec<Frame> {
        Vec::new()
    }
    fn failure(&mut self, _code: &str, _message: &str) -> Vec<Frame> {
        Vec::new()
    }
}
