//! The title's transition: a session's title is set once, after its first
//! exchange, while it is due (what a title is: [`crate::domain::title`]).

use super::{Refused, Session, conflict, invalid};
use crate::domain::{
    events::{EventKind, now_ms},
    title,
};

impl Session {
    /// The session's title, made after its first exchange (by a model, or
    /// from the first user message when that failed). Only a due title is
    /// set, once: later turns never change it.
    pub fn set_title(&mut self, title: String) -> Result<Vec<EventKind>, Refused> {
        if !self.title_due {
            return conflict("no title is due");
        }
        if !title::is_valid(&title) {
            return invalid(format!("a title is one line of 1 to {} characters", title::MAX_CHARS));
        }
        self.title = Some(title.clone());
        self.title_due = false;
        self.updated_ms = now_ms();
        Ok(vec![EventKind::TitleUpdated { title }])
    }
}
