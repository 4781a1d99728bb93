//! The raw Redis baseline: `XADD` as the gateway's append script runs it
//! (`XADD key MAXLEN <max> 0-* e <payload>`, exact trimming, explicit `0-*`
//! ids), but straight from a client with no Lua, no lease check, no publish.
//!
//! (a) one entry per round trip, sequential, on one connection;
//! (b) pipelines of `batch` entries, sequential pipelines, one connection.

use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;

use crate::Result;

/// One baseline measurement.
#[derive(Debug, Clone, Copy)]
pub struct RawResult {
    pub entries: u64,
    pub elapsed: Duration,
    /// Entries per round trip.
    pub batch: usize,
}

pub struct RawBench {
    conn: MultiplexedConnection,
    key: String,
    payload: String,
    max_len: u64,
}

impl RawBench {
    /// Appends go to the stream `key`, each entry `payload`.
    pub async fn connect(url: &str, key: String, payload: String, max_len: u64) -> Result<Self> {
        let conn = redis::Client::open(url)?.get_multiplexed_async_connection().await?;
        Ok(Self { conn, key, payload, max_len })
    }

    fn xadd(&self) -> redis::Cmd {
        let mut cmd = redis::cmd("XADD");
        cmd.arg(&self.key).arg("MAXLEN").arg(self.max_len).arg("0-*").arg("e").arg(&self.payload);
        cmd
    }

    /// `entries` XADDs in round trips of `batch` (1: no pipeline), stopping
    /// early once `budget` has passed. A few untimed round trips warm up.
    pub async fn run(&mut self, entries: u64, batch: usize, budget: Duration) -> Result<RawResult> {
        let batch = batch.max(1);
        for _ in 0..10 {
            self.round(batch).await?;
        }
        let started = Instant::now();
        let mut done = 0;
        while done < entries && started.elapsed() < budget {
            let n = batch.min((entries - done) as usize);
            self.round(n).await?;
            done += n as u64;
        }
        Ok(RawResult { entries: done, elapsed: started.elapsed(), batch })
    }

    async fn round(&mut self, n: usize) -> Result<()> {
        if n == 1 {
            self.xadd().query_async::<String>(&mut self.conn).await?;
        } else {
            let mut pipe = redis::pipe();
            for _ in 0..n {
                pipe.add_command(self.xadd());
            }
            pipe.query_async::<Vec<String>>(&mut self.conn).await?;
        }
        Ok(())
    }
}
