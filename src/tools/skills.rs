//! Skills, as llm-gateway has them (docs/llm-gateway-tools.md §2): every immediate
//! subdirectory `D` of each `[skills] dirs` entry with a `D/SKILL.md` whose
//! front matter (`---\n…\n---` at the very start, `key: value` lines split
//! at the first `:`) has a `name` and a `description`. Found once, at
//! start-up; unreadable ones are skipped. The agent is told about them in a
//! leading system message (agent mode only); the model reads one with the
//! `read` tool. Each skill's directory is mounted read-only in the sandbox
//! at `/skills/<D>` (`/skills/<D>-2`, … when two dirs have the same name),
//! and the locations given to the model are those paths.

use std::path::Path;

use crate::sandbox::{Mount, SKILLS_MOUNT};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    pub name: String,
    pub description: String,
    /// The skill's directory, as the sandbox (and `read`) sees it.
    pub mount: Mount,
}

/// The skills found in `dirs` (blocking: start-up).
pub fn discover(dirs: &[impl AsRef<Path>]) -> Vec<Skill> {
    let mut skills: Vec<Skill> = Vec::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir.as_ref()) else { continue };
        let mut entries: Vec<_> = entries.flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let Some(dir_name) = entry.file_name().to_str().map(str::to_string) else { continue };
            let Ok(text) = std::fs::read_to_string(entry.path().join("SKILL.md")) else { continue };
            let Some((name, description)) = front_matter(&text) else { continue };
            let mut target = format!("{SKILLS_MOUNT}/{dir_name}");
            let mut n = 1;
            while skills.iter().any(|s| s.mount.target == target) {
                n += 1;
                target = format!("{SKILLS_MOUNT}/{dir_name}-{n}");
            }
            skills.push(Skill { name, description, mount: Mount { source: entry.path(), target } });
        }
    }
    skills
}

/// `name` and `description` of a SKILL.md's front matter.
fn front_matter(text: &str) -> Option<(String, String)> {
    let rest = text.strip_prefix("---\n")?;
    let end = rest.find("\n---")?;
    let (mut name, mut description) = (None, None);
    for line in rest[..end].lines() {
        let Some((key, value)) = line.split_once(':') else { continue };
        match key.trim() {
            "name" => name = Some(value.trim().to_string()),
            "description" => description = Some(value.trim().to_string()),
            _ => {}
        }
    }
    Some((name.filter(|n| !n.is_empty())?, description.filter(|d| !d.is_empty())?))
}

/// The system message that lists the skills (empty without skills), as
/// llm-gateway words it (values are not escaped there either).
pub fn prompt(skills: &[Skill]) -> String {
    if skills.is_empty() {
        return String::new();
    }
    let mut text = String::from("<available_skills>\n");
    for skill in skills {
        text.push_str(&format!(
            "  <skill>\n    <name>{}</name>\n    <description>{}</description>\n    <location>{}/SKILL.md</location>\n  </skill>\n",
            skill.name, skill.description, skill.mount.target
        ));
    }
    text.push_str("</available_skills>");
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skills_are_found_by_their_front_matter_and_listed_with_sandbox_paths() {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in [
            ("pdf", "---\nname: pdf\ndescription: Work with PDFs: split, merge\n---\nbody"),
            ("broken", "no front matter"),
            ("nameless", "---\ndescription: x\n---\n"),
        ] {
            std::fs::create_dir(dir.path().join(name)).unwrap();
            std::fs::write(dir.path().join(name).join("SKILL.md"), text).unwrap();
        }
        let skills = discover(&[dir.path(), dir.path()]);
        assert_eq!(skills.len(), 2, "dirs are concatenated: {skills:?}");
        assert_eq!(skills[0].description, "Work with PDFs: split, merge");
        assert_eq!(
            (skills[0].mount.target.as_str(), skills[1].mount.target.as_str()),
            ("/skills/pdf", "/skills/pdf-2")
        );
        let prompt = prompt(&skills[..1]);
        assert_eq!(
            prompt,
            "<available_skills>\n  <skill>\n    <name>pdf</name>\n    <description>Work with PDFs: split, merge</description>\n    <location>/skills/pdf/SKILL.md</location>\n  </skill>\n</available_skills>"
        );
    }
}
