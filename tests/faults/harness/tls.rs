//! [`Certificates`]: a private CA, a server certificate for 127.0.0.1 and a
//! client certificate, made with Debian's `openssl` in a directory of the
//! test's own: what a self-hosted Redis with TLS is given.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

const OPENSSL: &str = "/usr/bin/openssl";

/// PEM files in one directory.
pub struct Certificates {
    dir: PathBuf,
}

impl Certificates {
    /// Makes the CA, then the server's and the client's certificates, each
    /// an ECDSA P-256 key signed by the CA, valid for two days.
    pub fn generate(dir: &Path) -> Self {
        let certs = Self { dir: dir.to_path_buf() };
        certs.openssl(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=switchboard test CA",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
        ]);
        // Cluster nodes present the server's certificate to each other too.
        certs.sign("server", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n");
        certs.sign("client", "extendedKeyUsage=clientAuth\n");
        certs
    }

    fn sign(&self, name: &str, extensions: &str) {
        let ext = format!("{name}.ext");
        std::fs::write(self.dir.join(&ext), extensions).expect("write the extensions");
        let (key, csr, pem) = (format!("{name}.key"), format!("{name}.csr"), format!("{name}.pem"));
        self.openssl(&[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-subj",
            &format!("/CN=switchboard test {name}"),
            "-keyout",
            &key,
            "-out",
            &csr,
        ]);
        self.openssl(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            &ext,
            "-out",
            &pem,
        ]);
    }

    fn openssl(&self, args: &[&str]) {
        let output = Command::new(OPENSSL)
            .args(args)
            .current_dir(&self.dir)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {OPENSSL}: {e}"));
        assert!(output.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    }

    /// The path of `name` (`ca.pem`, `server.pem`, `server.key`, `client.pem`, `client.key`).
    pub fn path(&self, name: &str) -> String {
        self.dir.join(name).to_str().expect("a UTF-8 temp dir").to_string()
    }
}
