//! llm-gateway's patch grammar (docs/llm-gateway-tools.md §1, `patch`): `*** Begin
//! Patch` … `*** End Patch` around `*** Add File:`, `*** Delete File:` and
//! `*** Update File:` operations with `@@` hunks, parsed and applied with
//! its error texts. Pure: parsing and applying hunks to text; the file
//! access and the read-before-patch rule are `workspace_tools.rs`'s.

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operation {
    Add { path: String, content: String },
    Delete { path: String },
    Update { path: String, hunks: Vec<Hunk> },
}

impl Operation {
    pub fn path(&self) -> &str {
        match self {
            Self::Add { path, .. } | Self::Delete { path } | Self::Update { path, .. } => path,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Hunk {
    /// Context and removed lines, in order: what the file must hold.
    pub old: Vec<String>,
    /// Context and added lines, in order: what replaces it.
    pub new: Vec<String>,
    /// The context lines alone (for the error text).
    pub context: Vec<String>,
}

const BEGIN: &str = "*** Begin Patch";
const END: &str = "*** End Patch";

/// Parses a patch; the error is the message after `Patch parse error: `.
pub fn parse(patch: &str) -> Result<Vec<Operation>, String> {
    let lines: Vec<&str> = patch.split('\n').collect();
    let first = lines.iter().position(|l| !l.trim().is_empty());
    let last = lines.iter().rposition(|l| !l.trim().is_empty());
    let (Some(first), Some(last)) = (first, last) else { return Err(format!("Patch must start with \"{BEGIN}\"")) };
    if lines[first].trim() != BEGIN {
        return Err(format!("Patch must start with \"{BEGIN}\""));
    }
    if lines[last].trim() != END || last == first {
        return Err(format!("Patch must end with \"{END}\""));
    }
    let mut operations = Vec::new();
    let mut i = first + 1;
    while i < last {
        let line = lines[i];
        if line.trim().is_empty() {
            i += 1;
        } else if let Some(path) = line.strip_prefix("*** Add File: ") {
            let path = path.trim().to_string();
            i += 1;
            let mut content = Vec::new();
            while i < last && lines[i].starts_with('+') {
                content.push(&lines[i][1..]);
                i += 1;
            }
            if content.is_empty() {
                return Err(format!("Add File \"{path}\" has no content lines"));
            }
            operations.push(Operation::Add { path, content: format!("{}\n", content.join("\n")) });
        } else if let Some(path) = line.strip_prefix("*** Delete File: ") {
            operations.push(Operation::Delete { path: path.trim().to_string() });
            i += 1;
        } else if let Some(path) = line.strip_prefix("*** Update File: ") {
            let path = path.trim().to_string();
            i += 1;
            let mut hunks = Vec::new();
            while i < last && lines[i].starts_with("@@") {
                i += 1;
                let mut hunk = Hunk::default();
                let mut body = Vec::new();
                while i < last && !lines[i].starts_with("@@") && !lines[i].starts_with("*** ") {
                    body.push(lines[i]);
                    i += 1;
                }
                // Blank lines before the next operation separate; they are not context.
                while body.last().is_some_and(|l| l.is_empty()) && (i >= last || lines[i].starts_with("*** ")) {
                    body.pop();
                }
                for line in body {
                    if let Some(added) = line.strip_prefix('+') {
                        hunk.new.push(added.to_string());
                    } else if let Some(removed) = line.strip_prefix('-') {
                        hunk.old.push(removed.to_string());
                    } else {
                        let context = line.strip_prefix(' ').unwrap_or(line).to_string();
                        hunk.old.push(context.clone());
                        hunk.new.push(context.clone());
                        hunk.context.push(context);
                    }
                }
                if hunk.old.is_empty() && hunk.new.is_empty() {
                    return Err(format!("Update File \"{path}\" has an empty hunk"));
                }
                hunks.push(hunk);
            }
            if hunks.is_empty() {
                return Err(format!("Update File \"{path}\" has no hunks"));
            }
            operations.push(Operation::Update { path, hunks });
        } else {
            return Err(format!("Unexpected line at position {i}: \"{line}\""));
        }
    }
    Ok(operations)
}

/// Applies `hunks` to `text` in order; the error is the message after
/// `Patch failed on {p}: `.
pub fn apply(text: &str, hunks: &[Hunk]) -> Result<String, String> {
    let trailing_newline = text.ends_with('\n');
    let body = text.strip_suffix('\n').unwrap_or(text);
    let mut lines: Vec<String> =
        if text.is_empty() { Vec::new() } else { body.split('\n').map(str::to_string).collect() };
    for hunk in hunks {
        if hunk.old.is_empty() {
            lines.splice(0..0, hunk.new.iter().cloned());
            continue;
        }
        let at = (0..=lines.len().saturating_sub(hunk.old.len()))
            .find(|&i| lines.len() >= i + hunk.old.len() && lines[i..i + hunk.old.len()] == hunk.old[..]);
        let Some(at) = at else {
            let shown: Vec<&str> = hunk.context.iter().take(3).map(String::as_str).collect();
            return Err(format!(
                "Could not find matching context for hunk. Context lines: [{}]. Please re-read the file and try again.",
                shown.join(", ")
            ));
        };
        lines.splice(at..at + hunk.old.len(), hunk.new.iter().cloned());
    }
    let mut out = lines.join("\n");
    if trailing_newline || (text.is_empty() && !out.is_empty()) {
        out.push('\n');
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grammar_parses_and_its_errors_are_llm_gateways() {
        let patch = "*** Begin Patch\n*** Add File: a.py\n+print(1)\n+print(2)\n\n*** Update File: b.txt\n@@ header\n one\n-two\n+TWO\n*** Delete File: c\n*** End Patch\n";
        let ops = parse(patch).unwrap();
        assert_eq!(ops[0], Operation::Add { path: "a.py".into(), content: "print(1)\nprint(2)\n".into() });
        assert_eq!(ops[2], Operation::Delete { path: "c".into() });
        let Operation::Update { hunks, .. } = &ops[1] else { panic!() };
        assert_eq!(apply("zero\none\ntwo\nthree\n", hunks).unwrap(), "zero\none\nTWO\nthree\n");
        for (bad, message) in [
            ("hello", "Patch must start with \"*** Begin Patch\""),
            ("*** Begin Patch\n*** Add File: a\n", "Patch must end with \"*** End Patch\""),
            ("*** Begin Patch\n*** Add File: a\n*** End Patch", "Add File \"a\" has no content lines"),
            ("*** Begin Patch\n*** Update File: a\n*** End Patch", "Update File \"a\" has no hunks"),
            ("*** Begin Patch\n*** Update File: a\n@@\n@@\n x\n*** End Patch", "Update File \"a\" has an empty hunk"),
            ("*** Begin Patch\nrm -rf /\n*** End Patch", "Unexpected line at position 1: \"rm -rf /\""),
        ] {
            assert_eq!(parse(bad).unwrap_err(), message, "{bad:?}");
        }
        let Operation::Update { hunks, .. } = &ops[1] else { panic!() };
        assert_eq!(
            apply("nothing\n", hunks).unwrap_err(),
            "Could not find matching context for hunk. Context lines: [one]. Please re-read the file and try again."
        );
        let insert = Hunk { old: vec![], new: vec!["top".into()], context: vec![] };
        assert_eq!(apply("a\n", &[insert]).unwrap(), "top\na\n");
    }
}
