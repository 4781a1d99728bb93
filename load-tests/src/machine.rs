//! Facts about a benchmark run that are not measurements: when, the command
//! line, the machine, the Redis version, and the load average around it.

use std::fmt::Write;

/// Facts about the run that are not measurements.
pub struct Context {
    pub date: String,
    pub command: String,
    pub cpus: usize,
    pub cpu_model: String,
    pub kernel: String,
    pub redis_version: String,
    pub load_start: String,
    pub load_end: String,
}

impl Context {
    pub fn gather() -> Self {
        let date = std::process::Command::new("date")
            .args(["-u", "+%Y-%m-%d %H:%M:%S UTC"])
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|| format!("{} s since the epoch", switchboard::domain::now_ms() / 1000));
        let cpu_model = read("/proc/cpuinfo")
            .lines()
            .find_map(|l| l.strip_prefix("model name").map(|r| r.trim_start_matches([' ', '\t', ':']).to_string()))
            .unwrap_or_else(|| "unknown".into());
        Self {
            date,
            command: std::env::args().collect::<Vec<_>>().join(" "),
            cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            cpu_model,
            kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
            redis_version: String::new(),
            load_start: load_average(),
            load_end: String::new(),
        }
    }

    /// [`Context::gather`] with the version of the Redis `admin` speaks to.
    pub async fn gather_with(admin: &mut crate::redis_admin::Admin) -> crate::Result<Self> {
        let mut context = Self::gather();
        context.redis_version = admin.version().await?;
        Ok(context)
    }

    pub fn finish(&mut self) {
        self.load_end = load_average();
    }

    /// A report's title and its lines on the date, command, machine, Redis
    /// and load average.
    pub fn write_header(&self, w: &mut String, title: &str, redis_url: &str) {
        let _ = writeln!(w, "# {title}\n");
        let _ = writeln!(w, "- date: {}", self.date);
        let _ = writeln!(w, "- command: `{}`", self.command);
        let _ = writeln!(
            w,
            "- machine: {} CPUs (nproc), {}, Linux {}; Redis {} at `{redis_url}`",
            self.cpus, self.cpu_model, self.kernel, self.redis_version
        );
        let _ = writeln!(w, "- load average (1/5/15 min): {} at start, {} at end", self.load_start, self.load_end);
    }
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

fn load_average() -> String {
    read("/proc/loadavg").split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}
