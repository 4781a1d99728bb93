//! What a session's title is: a few words naming the conversation, made
//! once, after the session's first exchange (its first turn that ended
//! normally), and never changed after. This module owns the title's shape
//! (at most [`MAX_WORDS`] words and [`MAX_CHARS`] characters, one line), the
//! request that asks a model for one (the first user message and the first
//! answer, cut short), how a model's answer becomes a title, and the title
//! a session gets when that call fails: the first words of its first user
//! message.
//!
//! Who asks the model, and when, is the orchestrator's; the transition that
//! stores a title is [`super::Session::set_title`].

use super::conversation::{ChatMessage, Role};

/// The longest title, in characters.
pub const MAX_CHARS: usize = 60;
/// The most words a title has.
pub const MAX_WORDS: usize = 8;
/// The title of a session whose first user message has no words.
pub const UNTITLED: &str = "New conversation";

/// The system message of a title request (a request whose first message is
/// this is a title request: the `demo` provider answers it with a title).
pub const INSTRUCTION: &str = "You name conversations. Reply with a short title (at most six words) for the \
conversation the user quotes: no quotes around it, no punctuation at its end, nothing else.";

/// How much of each quoted message a title request carries, in characters:
/// enough to name the conversation, cheap whatever its length.
const EXCERPT_CHARS: usize = 1500;
const USER_LABEL: &str = "User: ";
const ASSISTANT_LABEL: &str = "\n\nAssistant: ";

/// The messages of a title request for a conversation: the instruction, and
/// one user message quoting the first user message and the first answer
/// (each cut short: a title needs the gist). No tools.
pub fn request(history: &[ChatMessage]) -> Vec<ChatMessage> {
    let user = first_text(history, Role::User).unwrap_or_default();
    let after_user = history.iter().position(|m| m.role == Role::User).map_or(history.len(), |i| i + 1);
    let answer = first_text(&history[after_user..], Role::Assistant).unwrap_or_default();
    let quoted = format!("{USER_LABEL}{}{ASSISTANT_LABEL}{}", cut(user, EXCERPT_CHARS), cut(answer, EXCERPT_CHARS));
    vec![ChatMessage::text(Role::System, INSTRUCTION), ChatMessage::text(Role::User, quoted)]
}

/// Whether `messages` are a title request made by [`request`].
pub fn is_request(messages: &[ChatMessage]) -> bool {
    messages.first().is_some_and(|m| m.role == Role::System && m.content.as_deref() == Some(INSTRUCTION))
}

/// The first user message a title request quotes (as cut).
pub fn quoted_user(messages: &[ChatMessage]) -> Option<&str> {
    let quoted = messages.get(1)?.content.as_deref()?.strip_prefix(USER_LABEL)?;
    Some(quoted.split(ASSISTANT_LABEL).next().unwrap_or(quoted))
}

/// A model's answer as a title: its first non-empty line without a
/// `Title:` label, quotes, markdown marks or a final period, whitespace
/// collapsed, cut to the limits. `None` when nothing is left.
pub fn normalize(answer: &str) -> Option<String> {
    let line = answer.lines().map(str::trim).find(|l| !l.is_empty())?;
    let line = strip_label(line);
    let marks: &[char] = &['"', '\'', '“', '”', '‘', '’', '`', '*', '#', '_'];
    let line = line.trim_matches(|c: char| c.is_whitespace() || marks.contains(&c) || ".:;,".contains(c));
    let title = words(line);
    (!title.is_empty()).then_some(title)
}

/// The title of a conversation whose title call failed: the first words of
/// its first user message, or [`UNTITLED`].
pub fn fallback(history: &[ChatMessage]) -> String {
    let title = words(first_text(history, Role::User).unwrap_or_default());
    if title.is_empty() { UNTITLED.to_string() } else { title }
}

/// The first [`MAX_WORDS`] words of `text`, joined by single spaces, cut
/// to [`MAX_CHARS`] characters (at a word boundary when one is near).
pub fn words(text: &str) -> String {
    let mut title = String::new();
    for word in text.split_whitespace().take(MAX_WORDS) {
        let len = title.chars().count();
        let sep = usize::from(!title.is_empty());
        if len + sep + word.chars().count() > MAX_CHARS {
            if title.is_empty() {
                title = word.chars().take(MAX_CHARS).collect();
            }
            break;
        }
        if sep == 1 {
            title.push(' ');
        }
        title.push_str(word);
    }
    title
}

/// Whether `title` has a title's shape (what [`words`] makes).
pub fn is_valid(title: &str) -> bool {
    !title.is_empty() && title.chars().count() <= MAX_CHARS && words(title) == title
}

fn strip_label(line: &str) -> &str {
    let lower = line.to_ascii_lowercase();
    if lower.starts_with("title:") { line["title:".len()..].trim_start() } else { line }
}

/// The text of the first message of `role` that has some.
fn first_text(messages: &[ChatMessage], role: Role) -> Option<&str> {
    messages.iter().filter(|m| m.role == role).find_map(|m| m.content.as_deref().filter(|c| !c.trim().is_empty()))
}

fn cut(text: &str, chars: usize) -> &str {
    match text.char_indices().nth(chars) {
        Some((at, _)) => &text[..at],
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conversation() -> Vec<ChatMessage> {
        vec![
            ChatMessage::text(Role::System, "sys"),
            ChatMessage::text(Role::User, "  Where is   my order 42?\nIt was due Monday."),
            ChatMessage::text(Role::Assistant, "It ships tomorrow."),
            ChatMessage::text(Role::User, "thanks"),
        ]
    }

    #[test]
    fn a_request_quotes_the_first_exchange_under_the_instruction() {
        let messages = request(&conversation());
        assert!(is_request(&messages));
        assert_eq!(messages.len(), 2);
        let quoted = messages[1].content.as_deref().unwrap();
        assert!(quoted.starts_with("User:   Where is"), "{quoted}");
        assert!(quoted.ends_with("Assistant: It ships tomorrow."), "{quoted}");
        assert_eq!(quoted_user(&messages), Some("  Where is   my order 42?\nIt was due Monday."));
        assert!(!is_request(&conversation()));
    }

    #[test]
    fn a_long_message_is_quoted_in_part() {
        let long = "word ".repeat(2000);
        let messages = request(&[ChatMessage::text(Role::User, long)]);
        assert!(messages[1].content.as_deref().unwrap().chars().count() < EXCERPT_CHARS + 40);
    }

    #[test]
    fn an_answer_becomes_a_title_without_labels_quotes_or_a_final_period() {
        assert_eq!(normalize("Title: \"Order 42 delivery\".").as_deref(), Some("Order 42 delivery"));
        assert_eq!(normalize("\n\n**Refund   question**\nmore").as_deref(), Some("Refund question"));
        assert_eq!(
            normalize("one two three four five six seven eight nine ten").as_deref(),
            Some("one two three four five six seven eight")
        );
        assert_eq!(normalize("  \n \"\" "), None);
        let long = normalize(&"x".repeat(200)).unwrap();
        assert_eq!(long.chars().count(), MAX_CHARS);
        assert!(is_valid(&long));
    }

    #[test]
    fn a_failed_call_falls_back_to_the_first_words_of_the_first_user_message() {
        assert_eq!(fallback(&conversation()), "Where is my order 42? It was due");
        assert_eq!(fallback(&[ChatMessage::text(Role::User, "   ")]), UNTITLED);
        assert_eq!(fallback(&[]), UNTITLED);
    }

    #[test]
    fn titles_are_cut_at_a_word_boundary() {
        let text = "abcdefghij ".repeat(10);
        let title = words(&text);
        assert!(title.chars().count() <= MAX_CHARS && !title.ends_with(' '), "{title:?}");
        assert!(is_valid(&title));
        assert!(!is_valid(" padded"));
        assert!(!is_valid(""));
    }
}
