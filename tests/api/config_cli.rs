//! The `switchboard` binary's `check-config`, `token` and `key` subcommands.

use std::{io::Write, process::Command};

use switchboard::{auth::Authenticator, config::Config};

fn switchboard() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_switchboard"));
    command.env_remove("SWITCHBOARD_CONFIG").env_remove("SWITCHBOARD_DEV_SECRET");
    command
}

/// The least a configuration file holds: a tenant and the demo model.
const ACME_ON_DEMO: &str = r#"
[[tenants]]
id = "acme"
jwt = { hs256_secret = "0123456789abcdef" }
[models.demo]
provider = "demo"
"#;

fn file_with(text: &str) -> tempfile::NamedTempFile {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(text.as_bytes()).unwrap();
    file
}

#[test]
fn check_config_reports_all_three_mistakes_with_their_paths_and_fails() {
    let file = file_with(
        r#"
[server]
listen = "localhost"

[[tenants]]
id = "acme"
jwt = { hs256_secret = "0123456789abcdef" }

[models.fast]
provider = "openia"

[[tools]]
name = "lookup"
url = "http://127.0.0.1:9/"
permision = "allow"
"#,
    );
    let output = switchboard().arg("check-config").arg("--config").arg(file.path()).output().unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.contains("3 error(s)"), "{stderr}");
    for path in ["server.listen:", "models.fast.provider:", "tools.0.permision: unknown key"] {
        assert!(stderr.contains(path), "missing {path} in:\n{stderr}");
    }
}

#[test]
fn check_config_accepts_a_good_file_and_the_embedded_defaults() {
    let file = file_with(ACME_ON_DEMO);
    let output = switchboard().arg("check-config").arg("--config").arg(file.path()).output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let output = switchboard().arg("check-config").output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
}

#[test]
fn the_shipped_example_configuration_is_valid() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/switchboard.example.toml");
    let output = switchboard()
        .arg("check-config")
        .arg("--config")
        .arg(path)
        .env("ACME_JWT_SECRET", "an-example-secret-of-enough-length")
        .env("OPENAI_API_KEY", "sk-example")
        .env("ANTHROPIC_API_KEY", "sk-ant-example")
        .env("ACME_OPENAI_API_KEY", "sk-acme-example")
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
}

#[tokio::test]
async fn token_prints_a_jwt_the_same_configuration_accepts() {
    let output = switchboard().args(["token", "--tenant", "dev", "--subject", "newcomer"]).output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let token = String::from_utf8(output.stdout).unwrap();
    let config = Config::embedded_defaults(&|_| None).unwrap();
    let principal = Authenticator::from_config(&config).verify(token.trim()).await.expect("the token verifies");
    assert_eq!(&*principal.tenant, "dev");
    assert_eq!(principal.subject, "newcomer");
}

#[test]
fn token_for_an_unknown_tenant_fails() {
    let output = switchboard().args(["token", "--tenant", "nobody", "--subject", "x"]).output().unwrap();
    assert!(!output.status.success());
}

#[tokio::test]
async fn key_prints_a_new_key_and_the_entry_that_accepts_it() {
    let output = switchboard()
        .args(["key", "--tenant", "dev", "--subject", "holmes-ui", "--scope", "sessions:admin"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let stdout = String::from_utf8(output.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    let (key, entry) = (lines[0], lines[1]);
    assert!(key.starts_with("sbk_") && key.len() > 40, "{key}");
    assert!(!entry.contains(key), "the entry holds the digest, not the key");
    let text = format!("[[tenants]]\nid = \"dev\"\napi_keys = [{entry}]\n[models.demo]\nprovider = \"demo\"\n");
    let config = Config::from_toml(&text, &|_| None).expect("the entry pastes into a valid configuration");
    let authenticator = Authenticator::from_config(&config);
    let principal =
        authenticator.authenticate(Some(&switchboard::auth::Credential::ApiKey(key.into())), "/v1/sessions").await;
    let principal = principal.expect("the configuration accepts the key");
    assert_eq!((&*principal.tenant, principal.subject.as_str()), ("dev", "holmes-ui"));
    assert_eq!(principal.scopes, ["sessions:admin"]);
    let another = switchboard().args(["key", "--tenant", "dev", "--subject", "x"]).output().unwrap();
    assert_ne!(String::from_utf8(another.stdout).unwrap().lines().next(), Some(key), "keys are random");
}

#[test]
fn check_config_warns_about_anonymous_access() {
    let file = file_with(&format!(
        r#"
[anonymous]
tenant = "acme"
subject = "anonymous"
routes = ["holmes", "llm-gateway"]
{ACME_ON_DEMO}"#
    ));
    let output = switchboard().arg("check-config").arg("--config").arg(file.path()).output().unwrap();
    assert!(output.status.success());
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.contains("warning: anonymous access is on") && stderr.contains("holmes, llm-gateway"), "{stderr}");
}
