//! A redis-server of this test's own (its counters are the test's alone),
//! on a free port, stopped with the test.

use std::{
    net::TcpListener,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

pub struct RedisServer {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl RedisServer {
    pub fn start() -> Self {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let dir = tempfile::tempdir().unwrap();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server runs (scripts/ensure-redis.sh installs it)");
        let server = Self { child, port, _dir: dir };
        let deadline = Instant::now() + Duration::from_secs(10);
        while server.ping().is_err() {
            assert!(Instant::now() < deadline, "redis-server did not answer within 10 s");
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn ping(&self) -> redis::RedisResult<String> {
        let mut conn = redis::Client::open(self.url())?.get_connection()?;
        redis::cmd("PING").query(&mut conn)
    }

    /// Commands run so far, counting those inside scripts, not counting
    /// the `INFO`s that read them.
    pub fn commands(&self) -> u64 {
        let mut conn = redis::Client::open(self.url()).unwrap().get_connection().unwrap();
        let stats: String = redis::cmd("INFO").arg("commandstats").query(&mut conn).unwrap();
        stats
            .lines()
            .filter(|l| l.starts_with("cmdstat_") && !l.starts_with("cmdstat_info:"))
            .filter_map(|l| l.split("calls=").nth(1)?.split(',').next()?.parse::<u64>().ok())
            .sum()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
