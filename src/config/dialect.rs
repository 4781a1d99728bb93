//! The client dialects the gateway speaks, in one registry: each dialect's
//! name (as `[anonymous] routes` and sessions' `dialect` field spell it),
//! the route prefixes its endpoints live under, the error body its clients
//! parse, and whether its sessions get a title.
//!
//! `auth` (which routes `[anonymous]` opens), `error` (which body an error
//! gets) and the agent (whether to title a session) read a dialect's
//! behaviour from here; the handlers live in `api/<dialect>` and the
//! encoder in `protocol/<dialect>`. docs/architecture.md says how to add one.

/// The families of routes, by the dialect they speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dialect {
    Holmes,
    LlmGateway,
    Native,
    AiSdk,
    AgUi,
    Zot,
    Responses,
}

/// The shape of an error body a dialect's clients read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorStyle {
    /// `{"error": {"code", "message", "request_id"}}`.
    Standard,
    /// llm-gateway: `{"error": "<message>"}`.
    LlmGateway,
    /// HolmesGPT (FastAPI): `{"detail": "<message>"}`, or the list of a
    /// validation error.
    Holmes,
    /// OpenAI's: `{"error": {"message", "type", "param", "code"}}`, the
    /// `type` by status (`invalid_request_error`, `authentication_error`,
    /// `rate_limit_error`, `server_error`, …), as its SDKs read it.
    OpenAi,
}

/// What the registry knows of one dialect.
#[derive(Debug)]
pub struct DialectSpec {
    pub dialect: Dialect,
    pub name: &'static str,
    /// Paths equal to one of these, or below one (`/api` covers `/api/chat`).
    pub prefixes: &'static [&'static str],
    pub errors: ErrorStyle,
    /// Whether its sessions get a title after the first exchange: not for
    /// clients that hold their own conversations and show no session list
    /// (a title would be a model call per chat for nobody).
    pub titles: bool,
}

/// Every dialect; the order is the one `ALL` and error messages list.
const REGISTRY: [DialectSpec; 7] = [
    DialectSpec {
        dialect: Dialect::Holmes,
        name: "holmes",
        prefixes: &["/api"],
        errors: ErrorStyle::Holmes,
        titles: false,
    },
    DialectSpec {
        dialect: Dialect::LlmGateway,
        name: "llm-gateway",
        prefixes: &["/chat", "/models", "/summarize"],
        errors: ErrorStyle::LlmGateway,
        titles: false,
    },
    DialectSpec {
        dialect: Dialect::Native,
        name: "native",
        prefixes: &["/v1/sessions"],
        errors: ErrorStyle::Standard,
        titles: true,
    },
    DialectSpec {
        dialect: Dialect::AiSdk,
        name: "ai-sdk",
        prefixes: &["/v1/ai-sdk"],
        errors: ErrorStyle::Standard,
        titles: true,
    },
    DialectSpec {
        dialect: Dialect::AgUi,
        name: "ag-ui",
        prefixes: &["/v1/ag-ui"],
        errors: ErrorStyle::Standard,
        titles: true,
    },
    DialectSpec {
        dialect: Dialect::Zot,
        name: "zot",
        prefixes: &["/v1/zot"],
        errors: ErrorStyle::Standard,
        titles: true,
    },
    DialectSpec {
        dialect: Dialect::Responses,
        name: "openai-responses",
        prefixes: &["/v1/responses"],
        errors: ErrorStyle::OpenAi,
        titles: false,
    },
];

impl Dialect {
    pub const ALL: [Self; 7] =
        [Self::Holmes, Self::LlmGateway, Self::Native, Self::AiSdk, Self::AgUi, Self::Zot, Self::Responses];

    pub fn spec(self) -> &'static DialectSpec {
        REGISTRY.iter().find(|spec| spec.dialect == self).expect("every dialect is in the registry")
    }

    pub fn as_str(self) -> &'static str {
        self.spec().name
    }

    pub fn parse(name: &str) -> Option<Self> {
        REGISTRY.iter().find(|spec| spec.name == name).map(|spec| spec.dialect)
    }

    /// The dialect whose routes `path` belongs to; none for the routes of
    /// no dialect (probes, metrics, the console).
    pub fn of_path(path: &str) -> Option<Self> {
        let under =
            |prefix: &str| path == prefix || path.strip_prefix(prefix).is_some_and(|rest| rest.starts_with('/'));
        REGISTRY.iter().find(|spec| spec.prefixes.iter().any(|p| under(p))).map(|spec| spec.dialect)
    }

    /// Whether sessions of the dialect named `name` get a title; a name of
    /// no registered dialect (the console's `cosmo` format, say) does.
    pub fn titles(name: &str) -> bool {
        Self::parse(name).is_none_or(|dialect| dialect.spec().titles)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_dialect_is_registered_once_by_name() {
        for dialect in Dialect::ALL {
            assert_eq!(Dialect::parse(dialect.as_str()), Some(dialect));
            assert_eq!(REGISTRY.iter().filter(|spec| spec.dialect == dialect).count(), 1);
        }
        assert_eq!(REGISTRY.len(), Dialect::ALL.len());
        assert_eq!(Dialect::parse("cosmo"), None, "a format of the native routes, not a dialect of its own");
    }

    #[test]
    fn a_path_belongs_to_the_dialect_whose_prefix_it_is_under() {
        let cases = [
            ("/api/chat", Some(Dialect::Holmes)),
            ("/api", Some(Dialect::Holmes)),
            ("/apis", None),
            ("/chat", Some(Dialect::LlmGateway)),
            ("/chat/relay/r1", Some(Dialect::LlmGateway)),
            ("/models", Some(Dialect::LlmGateway)),
            ("/summarize", Some(Dialect::LlmGateway)),
            ("/chatter", None),
            ("/v1/sessions/s1/events", Some(Dialect::Native)),
            ("/v1/ai-sdk/chat", Some(Dialect::AiSdk)),
            ("/v1/ag-ui", Some(Dialect::AgUi)),
            ("/v1/zot", Some(Dialect::Zot)),
            ("/v1/responses/resp_1_s1/cancel", Some(Dialect::Responses)),
            ("/healthz", None),
            ("/console", None),
        ];
        for (path, dialect) in cases {
            assert_eq!(Dialect::of_path(path), dialect, "{path}");
        }
    }

    #[test]
    fn only_clients_without_a_session_list_go_untitled() {
        assert!(!Dialect::titles("holmes"));
        assert!(!Dialect::titles("llm-gateway"));
        assert!(Dialect::titles("native"));
        assert!(Dialect::titles("cosmo"));
    }
}
