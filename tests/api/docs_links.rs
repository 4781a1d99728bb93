//! The README and the reference documents under `docs/` stay navigable.
//!
//! `README.md` is the front door and `docs/` holds the reference; both are
//! edited beside the code, so these tests keep true that:
//!
//! - every relative link `[text](target)` in `README.md`, in the markdown
//!   files under `docs/` and in every other markdown file git tracks names a
//!   file or directory of the repository,
//!   resolved against the linking file's directory, and every `#anchor` into
//!   a markdown file names one of that file's headings by GitHub's slug rules
//!   (lowercase, spaces to `-`, other punctuation than `-` and `_` dropped,
//!   `-1`, `-2`, … for repeated headings). `http(s)://` and `mailto:` links
//!   are not checked, and text in fenced code blocks or inline code is not a
//!   link;
//! - `README.md` has at most 250 lines, and its first shell code block holds
//!   the two commands a newcomer runs on a fresh machine: the gateway on its
//!   embedded defaults, and the tests;
//! - no file tracked by git, nor any document checked here, points into a
//!   folder beside the repository that a clone does not have. Without git,
//!   only the documents are checked.
//!
//! Each test collects every failure and reports them at once, each with its
//! file and line.

use std::collections::HashMap;
use std::fs;
use std::path::{Component, Path, PathBuf};
use std::process::Command;

const README: &str = "README.md";
const DOCS_DIR: &str = "docs";
const README_MAX_LINES: usize = 250;
/// Runs the gateway with the embedded defaults: no network, no keys.
const RUN_COMMAND: &str = "cargo run --release";
/// Runs the unit and integration tests.
const TEST_COMMAND: &str = "scripts/test";
const SHELL_LANGUAGES: [&str; 4] = ["sh", "bash", "shell", "console"];
const EXTERNAL_SCHEMES: [&str; 3] = ["http://", "https://", "mailto:"];
/// A relative path into a folder beside the repository, written in two
/// halves so that this file does not itself contain it.
const OUTSIDE_FOLDER: &str = concat!("..", "/shared");

#[test]
fn every_link_in_the_docs_resolves() {
    let mut failures = Vec::new();
    for document in documents(&tracked_files().unwrap_or_default()) {
        failures.extend(broken_links(&document));
    }
    let count = failures.len();
    assert!(failures.is_empty(), "{count} broken link(s):\n{}", failures.join("\n"));
}

#[test]
fn the_readme_is_a_short_front_door() {
    let lines = read(&repo_root().join(README)).lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines, more than {README_MAX_LINES}: move the detail into docs/"
    );
}

#[test]
fn the_readme_starts_with_the_run_and_test_commands() {
    let readme = parse(&read(&repo_root().join(README)));
    let block = readme.blocks.iter().find(|block| is_shell(&block.info)).expect("README.md has no shell code block");
    let commands: Vec<&str> = block.lines.iter().map(String::as_str).map(command).collect();
    let missing: Vec<&str> =
        [RUN_COMMAND, TEST_COMMAND].into_iter().filter(|wanted| !commands.contains(wanted)).collect();
    assert!(missing.is_empty(), "README.md's first shell code block lacks {missing:?}; its commands: {commands:?}");
}

#[test]
fn no_tracked_file_points_outside_the_repository() {
    let tracked = tracked_files();
    if tracked.is_none() {
        eprintln!("git is not available: only the documents are checked");
    }
    let tracked = tracked.unwrap_or_default();
    let mut files = documents(&tracked);
    files.extend(tracked);
    files.sort();
    files.dedup();
    let mut failures = Vec::new();
    for file in &files {
        failures.extend(mentions(file, OUTSIDE_FOLDER));
    }
    let count = failures.len();
    assert!(
        failures.is_empty(),
        "{count} line(s) name {OUTSIDE_FOLDER}, a folder outside the repository:\n{}",
        failures.join("\n")
    );
}

#[test]
fn slugs_follow_githubs_rules() {
    let headings = "# Durability: what survives what\n## zot / Colibri\n### `Server-Timing`\n## Tests\n## Tests\n\
                    ## [Linked](elsewhere.md) heading\n```sh\n# a comment, not a heading\n```\n#hashtag\n";
    assert_eq!(
        heading_slugs(headings),
        ["durability-what-survives-what", "zot--colibri", "server-timing", "tests", "tests-1", "linked-heading"]
    );
}

#[test]
fn links_in_code_are_not_links() {
    let markdown = "see [a](a.md) and `[b](b.md)`\n\n```sh\n[c](c.md)\n```\n\
                    ![d](d.png \"title\") and [e](<e f.md>), [f](https://example.com)\n";
    let found: Vec<(usize, String)> = links(markdown).into_iter().map(|link| (link.line, link.target)).collect();
    let expected = [(1, "a.md"), (6, "d.png"), (6, "e f.md"), (6, "https://example.com")];
    assert_eq!(found, expected.map(|(line, target)| (line, target.to_string())));
}

fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `README.md`, every markdown file under `docs/`, and every other markdown
/// file of `tracked` (the deployment and load-test guides, the lab book), in
/// a stable order.
fn documents(tracked: &[PathBuf]) -> Vec<PathBuf> {
    let mut documents = vec![repo_root().join(README)];
    collect_markdown(&repo_root().join(DOCS_DIR), &mut documents);
    documents.extend(tracked.iter().filter(|path| is_markdown(path) && path.is_file()).cloned());
    documents.sort();
    documents.dedup();
    documents
}

fn collect_markdown(dir: &Path, found: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    let mut paths: Vec<PathBuf> = entries.filter_map(Result::ok).map(|entry| entry.path()).collect();
    paths.sort();
    for path in paths {
        if path.is_dir() {
            collect_markdown(&path, found);
        } else if is_markdown(&path) {
            found.push(path);
        }
    }
}

fn is_markdown(path: &Path) -> bool {
    path.extension().is_some_and(|extension| extension == "md")
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|error| panic!("cannot read {}: {error}", path.display()))
}

/// The path as the repository names it (`docs/api.md`), for messages.
fn relative(path: &Path) -> String {
    path.strip_prefix(repo_root()).unwrap_or(path).display().to_string()
}

/// Every link of `document` that does not resolve, as `file:line: (target) why`.
fn broken_links(document: &Path) -> Vec<String> {
    let file = relative(document);
    let mut broken = Vec::new();
    for Link { line, target } in links(&read(document)) {
        if let Some(problem) = problem(document, &target) {
            broken.push(format!("{file}:{line}: ({target}) {problem}"));
        }
    }
    broken
}

/// Why `target`, linked from `document`, does not resolve; `None` when it does.
fn problem(document: &Path, target: &str) -> Option<String> {
    if target.is_empty() {
        return Some("empty link target".to_string());
    }
    if is_external(target) {
        return None;
    }
    let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
    let file = resolve(document, path);
    if !file.starts_with(repo_root()) {
        return Some("points outside the repository".to_string());
    }
    if !file.exists() {
        return Some(format!("no such file: {}", relative(&file)));
    }
    if anchor.is_empty() || !is_markdown(&file) || heading_slugs(&read(&file)).iter().any(|slug| slug == anchor) {
        return None;
    }
    Some(format!("no heading with the anchor #{anchor} in {}", relative(&file)))
}

fn is_external(target: &str) -> bool {
    let target = target.to_ascii_lowercase();
    EXTERNAL_SCHEMES.into_iter().any(|scheme| target.starts_with(scheme))
}

/// The file a link's path names: relative to the linking document's
/// directory, or to the repository's root when it starts with `/`; an empty
/// path (`#anchor` alone) is the document itself.
fn resolve(document: &Path, path: &str) -> PathBuf {
    if path.is_empty() {
        return document.to_path_buf();
    }
    let joined = match path.strip_prefix('/') {
        Some(from_root) => repo_root().join(from_root),
        None => document.parent().expect("a document is in a directory").join(path),
    };
    normalize(&joined)
}

/// `a/b/../c` as `a/c`, without asking the file system.
fn normalize(path: &Path) -> PathBuf {
    let mut normal = PathBuf::new();
    for component in path.components() {
        match component {
            Component::ParentDir => {
                normal.pop();
            }
            Component::CurDir => {}
            other => normal.push(other),
        }
    }
    normal
}

/// A markdown link: the line it is on (from 1) and its destination.
struct Link {
    line: usize,
    target: String,
}

/// Every `[text](target)` and `![alt](target)` outside code.
fn links(markdown: &str) -> Vec<Link> {
    let prose = without_code_spans(&parse(markdown).prose);
    let mut links = Vec::new();
    for (index, line) in prose.lines().enumerate() {
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            if let Some(target) = link_target(rest) {
                links.push(Link { line: index + 1, target });
            }
        }
    }
    links
}

/// The destination at the start of `rest` (the text after `](`), without a
/// title: `<…>` as written, else up to whitespace or the unbalanced `)`.
fn link_target(rest: &str) -> Option<String> {
    if let Some(bracketed) = rest.strip_prefix('<') {
        return bracketed.split_once('>').map(|(target, _)| target.to_string());
    }
    let mut depth = 0_usize;
    for (at, character) in rest.char_indices() {
        match character {
            '(' => depth += 1,
            ')' if depth == 0 => return Some(rest[..at].to_string()),
            ')' => depth -= 1,
            other if other.is_whitespace() => return Some(rest[..at].to_string()),
            _ => {}
        }
    }
    None
}

/// An opening code fence: its character (`` ` `` or `~`) and how many.
#[derive(Clone, Copy)]
struct Fence {
    mark: char,
    len: usize,
}

/// A fenced code block: its info string (`sh`, `toml`, …) and its lines.
struct CodeBlock {
    info: String,
    lines: Vec<String>,
}

/// A document split into its prose, with the lines of fenced code blocks
/// (fences included) left empty so that line numbers hold, and the blocks.
struct Markdown {
    prose: String,
    blocks: Vec<CodeBlock>,
}

fn parse(text: &str) -> Markdown {
    let mut prose = String::with_capacity(text.len());
    let mut blocks = Vec::new();
    let mut open: Option<(Fence, CodeBlock)> = None;
    for line in text.lines() {
        match open.take() {
            Some((fence, block)) if closes(fence, line) => blocks.push(block),
            Some((fence, mut block)) => {
                block.lines.push(line.to_string());
                open = Some((fence, block));
            }
            None => match fence_opening(line) {
                Some((fence, info)) => open = Some((fence, CodeBlock { info: info.to_string(), lines: Vec::new() })),
                None => prose.push_str(line),
            },
        }
        prose.push('\n');
    }
    // A fence never closed runs to the end of the document.
    blocks.extend(open.map(|(_, block)| block));
    Markdown { prose, blocks }
}

/// The fence a line opens, with its info string, if it opens one.
fn fence_opening(line: &str) -> Option<(Fence, &str)> {
    let trimmed = line.trim_start();
    let mark = trimmed.chars().next().filter(|&first| first == '`' || first == '~')?;
    let len = trimmed.chars().take_while(|&character| character == mark).count();
    let info = trimmed[len..].trim();
    let opens = len >= 3 && !(mark == '`' && info.contains('`'));
    opens.then_some((Fence { mark, len }, info))
}

fn closes(fence: Fence, line: &str) -> bool {
    let trimmed = line.trim();
    let len = trimmed.chars().take_while(|&character| character == fence.mark).count();
    len >= fence.len && len == trimmed.len()
}

/// The prose with every inline code span blanked (newlines kept, so line
/// numbers hold): a run of backticks opens a span that the next run of the
/// same length within the paragraph closes; a run never closed is text.
fn without_code_spans(prose: &str) -> String {
    let characters: Vec<char> = prose.chars().collect();
    let mut text = String::with_capacity(prose.len());
    let mut at = 0;
    while at < characters.len() {
        if characters[at] != '`' {
            text.push(characters[at]);
            at += 1;
            continue;
        }
        let run = backtick_run(&characters, at);
        match closing_run(&characters, at + run, run) {
            Some(end) => {
                text.extend(characters[at..end].iter().map(|&character| if character == '\n' { '\n' } else { ' ' }));
                at = end;
            }
            None => {
                text.extend(&characters[at..at + run]);
                at += run;
            }
        }
    }
    text
}

fn backtick_run(characters: &[char], start: usize) -> usize {
    characters[start..].iter().take_while(|&&character| character == '`').count()
}

/// Where the run of exactly `len` backticks that closes a code span ends,
/// searching from `from` to the end of the paragraph.
fn closing_run(characters: &[char], from: usize, len: usize) -> Option<usize> {
    let mut at = from;
    while at < characters.len() {
        match characters[at] {
            '`' => {
                let run = backtick_run(characters, at);
                if run == len {
                    return Some(at + run);
                }
                at += run;
            }
            '\n' if ends_paragraph(characters, at) => return None,
            _ => at += 1,
        }
    }
    None
}

/// Whether the line after the newline at `newline` is blank.
fn ends_paragraph(characters: &[char], newline: usize) -> bool {
    characters[newline + 1..]
        .iter()
        .take_while(|&&character| character != '\n')
        .all(|character| character.is_whitespace())
}

/// The anchors GitHub gives the headings of a markdown document, in order.
fn heading_slugs(markdown: &str) -> Vec<String> {
    let mut slugs = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for line in parse(markdown).prose.lines() {
        let Some(text) = heading_text(line) else { continue };
        let base = slug(text);
        let repeats = seen.entry(base.clone()).or_insert(0);
        slugs.push(if *repeats == 0 { base } else { format!("{base}-{repeats}") });
        *repeats += 1;
    }
    slugs
}

/// The text of an ATX heading (`#` to `######` and a space), without a
/// closing sequence of `#`s.
fn heading_text(line: &str) -> Option<&str> {
    let trimmed = line.trim_start();
    let level = trimmed.chars().take_while(|&character| character == '#').count();
    let rest = &trimmed[level..];
    let is_heading = (1..=6).contains(&level) && (rest.is_empty() || rest.starts_with([' ', '\t']));
    is_heading.then(|| rest.trim().trim_end_matches('#').trim_end())
}

/// GitHub's anchor for a heading: links reduced to their text, lowercase,
/// spaces to `-`, and every character that is not alphanumeric, `-` or `_`
/// dropped.
fn slug(heading: &str) -> String {
    without_link_targets(heading)
        .to_lowercase()
        .chars()
        .filter_map(|character| match character {
            ' ' => Some('-'),
            kept if kept.is_alphanumeric() || kept == '-' || kept == '_' => Some(kept),
            _ => None,
        })
        .collect()
}

/// `[text](target)` as `[text]`.
fn without_link_targets(text: &str) -> String {
    let mut kept = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("](") {
        kept.push_str(&rest[..=at]);
        let after = &rest[at + 2..];
        rest = after.find(')').map_or("", |close| &after[close + 1..]);
    }
    kept.push_str(rest);
    kept
}

fn is_shell(info: &str) -> bool {
    info.split_whitespace().next().is_some_and(|language| SHELL_LANGUAGES.contains(&language))
}

/// A shell line without its comment, trimmed.
fn command(line: &str) -> &str {
    line.split_once('#').map_or(line, |(command, _)| command).trim()
}

/// The files git tracks, or `None` when git cannot say (not installed, not
/// a clone).
fn tracked_files() -> Option<Vec<PathBuf>> {
    let output = Command::new("git").arg("-C").arg(repo_root()).args(["ls-files", "-z"]).output().ok()?;
    if !output.status.success() {
        return None;
    }
    let names = output.stdout.split(|&byte| byte == 0).filter(|name| !name.is_empty());
    Some(names.map(|name| repo_root().join(String::from_utf8_lossy(name).into_owned())).collect())
}

/// `file:line` for every line of `file` that contains `needle`. A file that
/// cannot be read (tracked but deleted in the working tree) has none.
fn mentions(file: &Path, needle: &str) -> Vec<String> {
    let Ok(bytes) = fs::read(file) else { return Vec::new() };
    let name = relative(file);
    String::from_utf8_lossy(&bytes)
        .lines()
        .enumerate()
        .filter(|(_, line)| line.contains(needle))
        .map(|(index, _)| format!("{name}:{}", index + 1))
        .collect()
}
