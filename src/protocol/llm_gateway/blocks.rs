//! Which `text` and `reasoning` block each agent has open, and its id.
//!
//! llm-gateway's providers give each model call one id for its text and one
//! for its reasoning, and its clients group chunks into blocks by that id.
//! A block here is one model call's text (or reasoning) of one agent: it
//! opens at the call's first delta of that kind and ends with the call
//! (that agent's `message_completed` or `usage`), at a `turn_started` or
//! `resumed`, or at a `step_restarted`. Its id is `evt_<seq>` of its first
//! delta: derived from the log, so every stream — and a rejoin that
//! replayed the turn before its cursor — names it alike, with nothing
//! stored per token.

use foldhash::HashMap;

/// The two kinds of block a model call streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BlockKind {
    Text,
    Reasoning,
}

/// Open blocks by agent id.
#[derive(Debug, Default)]
pub(super) struct Blocks {
    open: HashMap<String, Vec<(BlockKind, String)>>,
}

impl Blocks {
    /// The id of `agent`'s open block of `kind`, opened by the delta `seq`
    /// when there is none.
    pub(super) fn id(&mut self, agent: &str, kind: BlockKind, seq: u64) -> &str {
        // Found without making a key (the common case: a block's later
        // deltas).
        if !self.open.get(agent).is_some_and(|open| open.iter().any(|(k, _)| *k == kind)) {
            self.open.entry(agent.to_string()).or_default().push((kind, format!("evt_{seq}")));
        }
        let open = self.open.get(agent).expect("opened above");
        open.iter().find(|(k, _)| *k == kind).map(|(_, id)| id.as_str()).expect("opened above")
    }

    /// Ends `agent`'s model call: the ids of the blocks it had open, in the
    /// order they opened.
    pub(super) fn end(&mut self, agent: &str) -> Vec<String> {
        self.open.remove(agent).map(|open| open.into_iter().map(|(_, id)| id).collect()).unwrap_or_default()
    }

    /// Ends every agent's blocks (a new turn, or a resumed one).
    pub(super) fn clear(&mut self) {
        self.open.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_keeps_the_id_of_its_first_delta_until_its_call_ends() {
        let mut blocks = Blocks::default();
        assert_eq!(blocks.id("main", BlockKind::Reasoning, 2), "evt_2");
        assert_eq!(blocks.id("main", BlockKind::Text, 4), "evt_4");
        assert_eq!(blocks.id("main", BlockKind::Reasoning, 5), "evt_2");
        assert_eq!(blocks.id("sub", BlockKind::Text, 6), "evt_6", "each agent has its own");
        assert_eq!(blocks.id("main", BlockKind::Text, 7), "evt_4");
        assert_eq!(blocks.end("main"), ["evt_2", "evt_4"]);
        assert_eq!(blocks.id("main", BlockKind::Text, 9), "evt_9", "the next call opens new blocks");
        assert_eq!(blocks.id("sub", BlockKind::Text, 10), "evt_6");
        blocks.clear();
        assert!(blocks.end("sub").is_empty());
    }
}
