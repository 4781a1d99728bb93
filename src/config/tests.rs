use std::collections::HashMap;

use super::*;

fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    move |name| map.get(name).cloned()
}

const GOOD: &str = r#"
[server]
listen = "0.0.0.0:9000"
replica_id = "a"

[store]
redis_url = "redis://127.0.0.1:6379"
key_prefix = "test:"

[[tenants]]
id = "acme"
jwt = { hs256_secret_env = "ACME_SECRET" }
rate_limit = { requests_per_second = 20, burst = 40 }
models = ["fast"]

[models.fast]
provider = "openai"
base_url = "http://127.0.0.1:9000/v1/"
model = "gpt-4o-mini"
api_key_env = "OPENAI_API_KEY"

[models.local]
provider = "demo"

[[tools]]
name = "lookup_order"
url = "http://127.0.0.1:9100/lookup"
permission = "allow"
"#;

#[test]
fn a_good_file_validates_with_secrets_from_the_environment() {
    let env = env_of(&[("ACME_SECRET", "0123456789abcdef0123"), ("OPENAI_API_KEY", "sk-test")]);
    let config = Config::from_toml(GOOD, &env).expect("valid");
    assert_eq!(config.server.listen.to_string(), "0.0.0.0:9000");
    assert_eq!(config.store.redis, Some(RedisTarget::Node("redis://127.0.0.1:6379".into())));
    let acme = &config.tenants["acme"];
    assert_eq!(acme.jwt.hs256_secret().unwrap().expose(), "0123456789abcdef0123");
    assert_eq!(acme.visible_models(&config.models), vec!["fast"]);
    assert_eq!(config.models["fast"].base_url, "http://127.0.0.1:9000/v1");
    assert_eq!(config.models["fast"].api_key.as_ref().unwrap().expose(), "sk-test");
    assert_eq!(config.tools[0].permission, Permission::Allow);
}

#[test]
fn environment_overrides_win_over_the_file() {
    let env = env_of(&[
        ("ACME_SECRET", "0123456789abcdef0123"),
        ("OPENAI_API_KEY", "sk-test"),
        ("SWITCHBOARD_LISTEN", "127.0.0.1:0"),
        ("SWITCHBOARD_REDIS_URL", "redis://10.0.0.1:6380"),
        ("SWITCHBOARD_REPLICA_ID", "replica-b"),
    ]);
    let config = Config::from_toml(GOOD, &env).expect("valid");
    assert_eq!(config.server.listen.port(), 0);
    assert_eq!(config.store.redis, Some(RedisTarget::Node("redis://10.0.0.1:6380".into())));
    assert_eq!(config.server.replica_id, "replica-b");
}

/// A tenant and a model: what a file needs besides its store.
const REST: &str = r#"
[[tenants]]
id = "acme"
jwt = { hs256_secret = "0123456789abcdef0123456789abcdef" }
models = ["local"]

[models.local]
provider = "demo"
"#;

#[test]
fn a_redis_cluster_is_named_by_seed_urls_in_the_file_or_the_environment() {
    let text = r#"
[store]
redis_cluster = ["redis://10.0.0.1:6379", "rediss://:pw@10.0.0.2:6379"]
wait_replicas = 1
"#;
    let text = format!("{text}{REST}");
    let config = Config::from_toml(&text, &env_of(&[])).expect("valid");
    let seeds = vec!["redis://10.0.0.1:6379".to_string(), "rediss://:pw@10.0.0.2:6379".to_string()];
    assert_eq!(config.store.redis, Some(RedisTarget::Cluster(seeds)));
    assert_eq!(config.store.wait_replicas, 1);
    assert_eq!(config.store.wait_replicas_timeout, std::time::Duration::from_millis(500));

    // The environment's store replaces the file's, whichever kind either is.
    let env = env_of(&[("SWITCHBOARD_REDIS_CLUSTER", "redis://a:7000, redis://b:7001,")]);
    let config = Config::from_toml(&format!("[store]\nredis_url = \"redis://x:6379\"\n{REST}"), &env).expect("valid");
    let seeds = vec!["redis://a:7000".to_string(), "redis://b:7001".to_string()];
    assert_eq!(config.store.redis, Some(RedisTarget::Cluster(seeds)));
    let env = env_of(&[("SWITCHBOARD_REDIS_URL", "redis://x:6379"), ("SWITCHBOARD_WAIT_REPLICAS", "2")]);
    let config = Config::from_toml(&text, &env).expect("valid");
    assert_eq!(config.store.redis, Some(RedisTarget::Node("redis://x:6379".into())));
    assert_eq!(config.store.wait_replicas, 2, "the environment's wait_replicas wins");
}

#[test]
fn a_store_is_one_redis_or_one_cluster_of_redis_urls() {
    let path_of = |text: &str, env: &[(&str, &str)]| {
        let errors = Config::from_toml(&format!("{text}{REST}"), &env_of(env)).unwrap_err();
        errors.0.iter().map(|e| e.path.clone()).collect::<Vec<_>>()
    };
    let both = "[store]\nredis_url = \"redis://x\"\nredis_cluster = [\"redis://y\"]\n";
    assert_eq!(path_of(both, &[]), vec!["store.redis_cluster"]);
    let env = [("SWITCHBOARD_REDIS_URL", "redis://x"), ("SWITCHBOARD_REDIS_CLUSTER", "redis://y")];
    assert_eq!(path_of("", &env), vec!["store.redis_cluster"]);
    assert_eq!(path_of("[store]\nredis_cluster = []\n", &[]), vec!["store.redis_cluster"]);
    let bad = "[store]\nredis_cluster = [\"redis://y\", \"http://z\"]\n";
    assert_eq!(path_of(bad, &[]), vec!["store.redis_cluster[1]"]);
    let zero = "[store]\nredis_url = \"redis://x\"\nwait_replicas_timeout_ms = 0\n";
    assert_eq!(path_of(zero, &[]), vec!["store.wait_replicas_timeout_ms"]);
    assert_eq!(path_of("", &[("SWITCHBOARD_WAIT_REPLICAS", "one")]), vec!["store.wait_replicas"]);
    let linger = "[store]\ncommit_linger_ms = 1001\n";
    assert_eq!(path_of(linger, &[]), vec!["store.commit_linger_ms"]);
    let config = Config::from_toml(&format!("[store]\ncommit_linger_ms = 50\n{REST}"), &env_of(&[])).expect("valid");
    assert_eq!(config.store.commit_linger, std::time::Duration::from_millis(50));
    let config = Config::from_toml(REST, &env_of(&[])).expect("valid");
    assert_eq!(config.store.commit_linger, std::time::Duration::ZERO, "off by default");
    // Death hints every 100 ms by default, 0 turns them off, 5 s at most;
    // a held turn's notices every 5 s, given up after 60 s.
    assert_eq!(config.store.liveness_check, Some(std::time::Duration::from_millis(100)));
    assert_eq!(config.store.hold_notice, std::time::Duration::from_secs(5));
    assert_eq!(config.store.hold_max, std::time::Duration::from_secs(60));
    let off = Config::from_toml(&format!("[store]\nliveness_check_ms = 0\n{REST}"), &env_of(&[])).expect("valid");
    assert_eq!(off.store.liveness_check, None);
    let cluster = "[store]\nredis_cluster = [\"redis://127.0.0.1:7000\"]\n";
    let on_cluster = Config::from_toml(&format!("{cluster}{REST}"), &env_of(&[])).expect("valid");
    assert_eq!(on_cluster.store.liveness_check, Some(std::time::Duration::from_millis(100)), "on a cluster too");
    let off = Config::from_toml(&format!("{cluster}liveness_check_ms = 0\n{REST}"), &env_of(&[])).expect("valid");
    assert_eq!(off.store.liveness_check, None);
    assert_eq!(path_of("[store]\nliveness_check_ms = 5001\n", &[]), vec!["store.liveness_check_ms"]);
    assert_eq!(path_of("[store]\nhold_max_secs = 0\n", &[]), vec!["store.hold_max_secs"]);
    assert_eq!(path_of("[store]\nhold_notice_secs = 0\n", &[]), vec!["store.hold_notice_secs"]);
}

#[test]
fn store_tls_reads_a_ca_and_a_client_certificate_for_rediss_urls_only() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_string()
    };
    let ca = write("ca.pem", "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n");
    let key = write("key.pem", "-----BEGIN PRIVATE KEY-----\nsecret-key-bytes\n-----END PRIVATE KEY-----\n");
    let junk = write("junk.pem", "not a certificate");
    let store = |url: &str, tls: &str| format!("[store]\nredis_url = \"{url}\"\n[store.tls]\n{tls}\n{REST}");

    let text = store("rediss://10.0.0.1:6380", &format!("ca_file = {ca:?}\ncert_file = {ca:?}\nkey_file = {key:?}"));
    let config = Config::from_toml(&text, &env_of(&[])).expect("valid");
    assert_eq!(config.store.tls.ca.as_deref(), Some(std::fs::read(&ca).unwrap().as_slice()));
    assert!(config.store.tls.client.is_some());
    assert!(!format!("{config:?}").contains("secret-key-bytes"), "the client key is never printed");

    let path_of = |text: String| {
        let errors = Config::from_toml(&text, &env_of(&[])).unwrap_err();
        errors.0.iter().map(|e| e.path.clone()).collect::<Vec<_>>()
    };
    assert_eq!(path_of(store("redis://10.0.0.1:6379", &format!("ca_file = {ca:?}"))), vec!["store.tls"]);
    assert_eq!(path_of(store("rediss://x:6380", &format!("ca_file = {junk:?}"))), vec!["store.tls.ca_file"]);
    assert_eq!(path_of(store("rediss://x:6380", "ca_file = \"/nonexistent/ca.pem\"")), vec!["store.tls.ca_file"]);
    assert_eq!(path_of(store("rediss://x:6380", &format!("cert_file = {ca:?}"))), vec!["store.tls"]);
}

#[test]
fn every_mistake_is_reported_with_its_path() {
    let text = r#"
[server]
listn = "127.0.0.1:8080"

[[tenants]]
id = "acme"
jwt = { hs256_secret = "0123456789abcdef" }

[models.fast]
provider = "openia"

[[tools]]
name = "lookup"
url = "http://x/"
permission = "sometimes"
"#;
    let errors = Config::from_toml(text, &env_of(&[])).unwrap_err();
    let paths: Vec<&str> = errors.0.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, vec!["server.listn", "models.fast.provider", "tools[0].permission"], "{errors}");
}

#[test]
fn a_type_error_names_its_field() {
    let errors = Config::from_toml("[server]\nmax_body_bytes = \"big\"\n", &env_of(&[])).unwrap_err();
    assert_eq!(errors.0[0].path, "server.max_body_bytes", "{errors}");
}

#[test]
fn a_missing_secret_variable_is_a_configuration_error() {
    let errors = Config::from_toml(GOOD, &env_of(&[("OPENAI_API_KEY", "k")])).unwrap_err();
    assert_eq!(errors.0.len(), 1, "{errors}");
    assert_eq!(errors.0[0].path, "tenants[0].jwt.hs256_secret_env");
    assert!(errors.0[0].message.contains("ACME_SECRET"));
}

#[test]
fn short_secrets_unknown_model_references_and_bad_urls_are_refused() {
    let text = r#"
[store]
redis_url = "http://not-redis"
key_prefix = "sb:{team}:"
[[tenants]]
id = "a b"
jwt = { hs256_secret = "short" }
models = ["nope"]
[models.m]
provider = "demo"
"#;
    let errors = Config::from_toml(text, &env_of(&[])).unwrap_err();
    let paths: Vec<&str> = errors.0.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        vec!["store.redis_url", "store.key_prefix", "tenants[0].id", "tenants[0].jwt", "tenants[0].models[0]"],
        "{errors}"
    );
}

#[test]
fn embedded_defaults_need_no_file_no_network_and_no_keys() {
    let config = Config::embedded_defaults(&env_of(&[])).expect("defaults are valid");
    assert!(config.uses_builtin_dev_secret);
    assert_eq!(config.server.listen.to_string(), "127.0.0.1:8080");
    assert!(config.store.redis.is_none(), "in-memory store by default");
    assert_eq!(config.tenants["dev"].jwt.hs256_secret().unwrap().expose(), BUILTIN_DEV_SECRET);
    assert_eq!(config.models["demo"].provider, ProviderKind::Demo);
    assert_eq!(config.tool("lookup_order").unwrap().target, ToolTarget::BuiltinDemo);
}

#[test]
fn the_dev_secret_comes_from_the_environment_when_set() {
    let env = env_of(&[("SWITCHBOARD_DEV_SECRET", "a-long-enough-dev-secret")]);
    let config = Config::embedded_defaults(&env).unwrap();
    assert!(!config.uses_builtin_dev_secret);
    assert_eq!(config.tenants["dev"].jwt.hs256_secret().unwrap().expose(), "a-long-enough-dev-secret");
}

#[test]
fn secrets_never_show_in_debug_output() {
    let config = Config::embedded_defaults(&env_of(&[])).unwrap();
    assert!(!format!("{config:?}").contains(BUILTIN_DEV_SECRET));
}

#[test]
fn tenant_credentials_come_from_the_environment_or_a_file_and_are_checked_against_the_models() {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    std::io::Write::write_all(&mut file, b"  sk-from-file\n").unwrap();
    let text = format!(
        r#"
[[tenants]]
id = "a"
jwt = {{ hs256_secret = "0123456789abcdef0123" }}
credentials.fast = {{ api_key_env = "A_KEY" }}
credentials.slow = {{ api_key_file = "{}" }}
[[tenants]]
id = "b"
jwt = {{ hs256_secret = "0123456789abcdef0123" }}
models = ["fast"]
credentials.slow = {{ api_key_env = "B_KEY" }}
credentials.local = {{ api_key_env = "B_KEY" }}
credentials.nope = {{ api_key_env = "B_KEY" }}
credentials.fast = {{ api_key_env = "B_KEY", api_key_file = "/x" }}
[models.fast]
provider = "openai"
model = "m"
[models.slow]
provider = "anthropic"
model = "m"
[models.local]
provider = "demo"
"#,
        file.path().display()
    );
    let env = env_of(&[("A_KEY", "sk-from-env"), ("B_KEY", "sk-b")]);
    let errors = Config::from_toml(&text, &env).unwrap_err();
    let paths: Vec<&str> = errors.0.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        vec![
            "tenants[1].credentials.fast",
            "tenants[1].credentials.local",
            "tenants[1].credentials.nope",
            "tenants[1].credentials.slow",
        ],
        "{errors}"
    );
    assert!(errors.0[0].message.contains("not both"), "{errors}");

    let valid: String = text.lines().filter(|l| !l.contains("B_KEY")).collect::<Vec<_>>().join("\n");
    let config = Config::from_toml(&valid, &env).expect("valid");
    let a = &config.tenants["a"].credentials;
    assert_eq!(a["fast"].expose(), "sk-from-env");
    assert_eq!(a["slow"].expose(), "sk-from-file", "surrounding whitespace is dropped");
    assert!(!format!("{config:?}").contains("sk-from"), "keys never show in debug output");
}

#[test]
fn input_limits_have_defaults_and_must_be_positive() {
    let config = Config::embedded_defaults(&env_of(&[])).unwrap();
    assert_eq!(config.server.input, InputLimits::default());
    let text = "[server]\nmax_json_depth = 0\nbody_read_timeout_secs = 0\nmax_header_count = 10\n";
    let errors = Config::from_toml(text, &env_of(&[])).unwrap_err();
    let paths: Vec<&str> = errors.0.iter().map(|e| e.path.as_str()).collect();
    assert!(paths.starts_with(&["server.max_json_depth", "server.body_read_timeout_secs"]), "{errors}");
}

#[test]
fn a_subject_rate_defaults_its_burst_and_may_not_exceed_the_tenants() {
    let tenant = |limit: &str| {
        format!(
            "[[tenants]]\nid = \"t\"\njwt = {{ hs256_secret = \"0123456789abcdef0123\" }}\nrate_limit = {limit}\n[models.m]\nprovider = \"demo\"\n"
        )
    };
    let config =
        Config::from_toml(&tenant("{ requests_per_second = 10, subject_requests_per_second = 2 }"), &env_of(&[]))
            .unwrap();
    let limit = config.tenants["t"].rate_limit.unwrap();
    assert_eq!((limit.subject_requests_per_second, limit.subject_burst), (Some(2), 2));

    let errors = Config::from_toml(
        &tenant("{ requests_per_second = 10, subject_requests_per_second = 11, subject_burst = 0 }"),
        &env_of(&[]),
    )
    .unwrap_err();
    let paths: Vec<&str> = errors.0.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        vec!["tenants[0].rate_limit.subject_burst", "tenants[0].rate_limit.subject_requests_per_second"],
        "{errors}"
    );
}

#[test]
fn model_ids_may_hold_slashes_and_colons_and_patterns_are_checked() {
    let text = r#"
[agent]
default_model = "openai/gpt-4o-mini"

[[tenants]]
id = "acme"
jwt = { hs256_secret = "0123456789abcdef" }
models = ["openai/*", "nvidia/nemotron-nano-9b-v2:free"]
default_model = "nvidia/nemotron-nano-9b-v2:free"

[models."openai/*"]
provider = "openai"

[models."nvidia/nemotron-nano-9b-v2:free"]
provider = "openai"
model = "nvidia/nemotron-nano-9b-v2:free"
prices = { input_per_million = 0.15, output_per_million = 0.6 }
"#;
    let config = Config::from_toml(text, &|_| None).expect("valid");
    assert_eq!(config.model("openai/gpt-5").unwrap().config.model, "gpt-5");
    assert_eq!(config.default_model("acme"), Some("nvidia/nemotron-nano-9b-v2:free"));
    assert!(config.models["nvidia/nemotron-nano-9b-v2:free"].prices.is_some());

    let bad = r#"
[agent]
default_model = "anthropic/claude"

[[tenants]]
id = "acme"
jwt = { hs256_secret = "0123456789abcdef" }
models = ["demo"]
default_model = "mock/x"

[models."has space"]
provider = "demo"

[models."mock/*"]
provider = "openai"
model = "fixed"

[models."*"]
provider = "openai"

[models.demo]
provider = "demo"
prices = { input_per_million = -1 }
"#;
    let errors = Config::from_toml(bad, &|_| None).unwrap_err().to_string();
    for expected in [
        "agent.default_model: \"anthropic/claude\" is not a configured model alias",
        "tenants[0].default_model: \"mock/*\" is not in this tenant's models",
        "models.\"has space\": \"has space\" is not a model id",
        "models.\"mock/*\".model: a pattern takes the upstream model id from the requested id",
        "models.\"*\": a pattern is `prefix/*`",
        "models.demo.prices.input_per_million: must be a number",
        "models.demo.prices.output_per_million: required",
    ] {
        assert!(errors.contains(expected), "missing {expected:?} in:\n{errors}");
    }
}

#[test]
fn api_keys_may_replace_token_keys_and_anonymous_access_is_checked() {
    let digest = "a".repeat(64);
    let text = format!(
        r#"
[anonymous]
tenant = "acme"
subject = "anonymous"
routes = ["holmes", "llm-gateway"]

[[tenants]]
id = "acme"
api_keys = [{{ sha256 = "{digest}", subject = "ui" }}]

[models.demo]
provider = "demo"
"#
    );
    let config = Config::from_toml(&text, &|_| None).expect("a tenant with API keys only needs no jwt");
    assert!(config.tenants["acme"].jwt.keys.is_empty());
    assert_eq!(config.anonymous.as_ref().unwrap().routes, [Dialect::Holmes, Dialect::LlmGateway]);
    assert!(config.warnings()[0].contains("anonymous access is on"));

    let bad = r#"
[anonymous]
tenant = "nobody"
routes = ["holmes", "cosmo", "holmes"]

[[tenants]]
id = "acme"
api_keys = [{ sha256 = "abc", subject = "ui" }, { sha256 = "0000000000000000000000000000000000000000000000000000000000000000" }]
api_keys_file = "/nonexistent/keys.toml"

[[tenants]]
id = "globex"

[models.demo]
provider = "demo"
"#;
    let errors = Config::from_toml(bad, &|_| None).unwrap_err().to_string();
    for expected in [
        "anonymous.tenant: no tenant \"nobody\"",
        "anonymous.subject: required",
        "anonymous.routes[1]: \"cosmo\" is not one of holmes, llm-gateway, native, ai-sdk, ag-ui, zot",
        "anonymous.routes[2]: \"holmes\" is listed twice",
        "tenants[0].api_keys[0].sha256: must be 64 hex digits",
        "tenants[0].api_keys[1].subject: required",
        "tenants[0].api_keys_file: cannot read /nonexistent/keys.toml",
        "tenants[1].jwt: required (hs256_secret, hs256_secret_env, keys or jwks_url) unless the tenant has api_keys",
    ] {
        assert!(errors.contains(expected), "missing {expected:?} in:\n{errors}");
    }
}

#[test]
fn titles_are_on_by_default_and_may_be_turned_off() {
    let base = "[[tenants]]\nid = \"acme\"\njwt = { hs256_secret = \"0123456789abcdef\" }\n\n[models.demo]\nprovider = \"demo\"\n";
    assert!(Config::from_toml(base, &|_| None).unwrap().agent.titles);
    let off = format!("[agent]\ntitles = false\n\n{base}");
    assert!(!Config::from_toml(&off, &|_| None).unwrap().agent.titles);
    let wrong = format!("[agent]\ntitles = \"yes\"\n\n{base}");
    assert!(Config::from_toml(&wrong, &|_| None).unwrap_err().to_string().contains("titles"));
}

#[test]
fn mcp_servers_are_checked_and_their_header_secrets_never_shown() {
    let good = format!(
        r#"{GOOD}
[[mcp_servers]]
name = "notion"
url = "https://mcp.example.com/mcp"
headers = {{ Authorization = {{ env = "NOTION_TOKEN" }}, X-Label = {{ value = "sb" }} }}
allowed_tools = ["search"]
tool_permissions = {{ search = "allow" }}
forward_headers = ["X-User-Token"]
"#
    )
    .replace("models = [\"fast\"]\n", "models = [\"fast\"]\nmcp_servers = [\"notion\"]\n");
    let env = env_of(&[
        ("ACME_SECRET", "0123456789abcdef0123"),
        ("OPENAI_API_KEY", "sk-x"),
        ("NOTION_TOKEN", "Bearer nt-secret"),
    ]);
    let config = Config::from_toml(&good, &env).unwrap();
    let server = config.mcp_server("notion").unwrap();
    assert_eq!(server.headers[0].1.expose(), "Bearer nt-secret");
    assert_eq!(server.permission_of("search"), Permission::Allow);
    assert_eq!(server.permission_of("create"), Permission::Ask);
    assert!(server.offers("search") && !server.offers("create"));
    assert!(!server.retry_on_takeover);
    assert_eq!(server.forward_headers, ["x-user-token"]);
    assert_eq!(config.forwarded_headers(), ["x-user-token"]);
    assert_eq!(config.tenants["acme"].mcp_servers, ["notion"]);
    assert!(config.is_server_tool("mcp__notion__search") && !config.is_server_tool("mcp__other__search"));
    assert!(!format!("{config:?}").contains("nt-secret"), "a header's value never shows");

    let bad = format!(
        r#"{GOOD}
[[mcp_servers]]
name = "my_server"
url = "ftp://x"
headers = {{ Authorization = {{}} }}
forward_headers = ["content-type"]
permission = "maybe"
protocol = "2024-01-01"
timeout_secs = 0

[[mcp_servers]]
name = "my_server"
url = "http://x/mcp"
"#
    )
    .replace("models = [\"fast\"]\n", "models = [\"fast\"]\nmcp_servers = [\"missing\"]\n");
    let errors = Config::from_toml(&bad, &env).unwrap_err();
    let paths: Vec<&str> = errors.0.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "mcp_servers[0].name",
            "mcp_servers[0].url",
            "mcp_servers[0].headers.Authorization",
            "mcp_servers[0].forward_headers[0]",
            "mcp_servers[0].timeout_secs",
            "mcp_servers[0].protocol",
            "mcp_servers[0].permission",
            "mcp_servers[1].name",
            "mcp_servers[1].name",
            "tenants[acme].mcp_servers",
        ],
        "{errors}"
    );
}
