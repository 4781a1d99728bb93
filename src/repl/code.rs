//! A model reply's cell: the code of its one ```` ```js ```` block
//! (llm-gateway's pattern, `js` or `javascript`).

use std::sync::LazyLock;

use regex::Regex;

static BLOCK: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"```(?:js|javascript)\n([\s\S]*?)```").expect("the code block pattern compiles"));

/// The code of the reply's one block, or the message the model gets
/// (llm-gateway's texts).
pub fn extract(reply: &str) -> Result<String, String> {
    let mut blocks = BLOCK.captures_iter(reply).map(|c| c[1].to_string());
    match (blocks.next(), blocks.next()) {
        (Some(code), None) => Ok(code),
        (Some(_), Some(_)) => {
            Err("Response contained multiple code blocks. Expected exactly one ```js block per turn.".into())
        }
        (None, _) => Err("Response contained no code block. Expected exactly one ```js block per turn.".into()),
    }
}
