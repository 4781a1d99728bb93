//! A redis-server of this test's own (its counters are the test's alone):
//! the fault harness's [`OwnRedis`], and its command count.

pub use super::own_redis::OwnRedis as RedisServer;

/// Commands `redis` ran so far, counting those inside scripts, not counting
/// the `INFO`s that read them.
pub fn commands(redis: &RedisServer) -> u64 {
    let mut conn = redis::Client::open(redis.url()).unwrap().get_connection().unwrap();
    let stats: String = redis::cmd("INFO").arg("commandstats").query(&mut conn).unwrap();
    stats
        .lines()
        .filter(|l| l.starts_with("cmdstat_") && !l.starts_with("cmdstat_info:"))
        .filter_map(|l| l.split("calls=").nth(1)?.split(',').next()?.parse::<u64>().ok())
        .sum()
}
