//! Child processes that never outlive the process that started them.
//!
//! Three layers, because a test binary can end in three ways:
//! - normal exit (tests passed or failed): an `atexit` hook kills every child and removes every
//!   cluster directory, since `static` clusters are never dropped;
//! - a panic or an early `drop`: [`Child`]'s and the cluster's `Drop` stop them gracefully
//!   (SIGTERM, then SIGKILL after a grace) and remove the directory;
//! - a kill (SIGKILL, Ctrl-C): children get SIGKILL from the kernel through `PR_SET_PDEATHSIG`,
//!   and the next start sweeps the leftover directory (see `crate::sweep_stale_dirs`).
//!
//! `PR_SET_PDEATHSIG` fires when the *thread* that forked the child exits, not the process, and
//! test threads come and go; so every child is forked by one long-lived spawner thread.

use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, Once, OnceLock};
use std::time::{Duration, Instant};

type SpawnRequest = (Command, mpsc::Sender<io::Result<std::process::Child>>);

/// Process ids and directories to clean up at exit.
struct Registry {
    pids: Vec<u32>,
    dirs: Vec<PathBuf>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    pids: Vec::new(),
    dirs: Vec::new(),
});
static SPAWNER: OnceLock<Mutex<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
static ATEXIT: Once = Once::new();

extern "C" fn cleanup_at_exit() {
    let (pids, dirs) = match REGISTRY.lock() {
        Ok(mut r) => (std::mem::take(&mut r.pids), std::mem::take(&mut r.dirs)),
        Err(_) => return,
    };
    // SIGKILL at once: the directories go next, so nothing a graceful stop would save is kept,
    // and SIGTERM's grace cost each test binary 5 s (the API server and the operator wait for
    // each other's connections while etcd is already gone).
    terminate(&pids, Duration::ZERO);
    for dir in dirs {
        let _ = std::fs::remove_dir_all(dir);
    }
}

fn install_atexit() {
    ATEXIT.call_once(|| {
        // SAFETY: registering a plain `extern "C" fn` with libc's atexit has no preconditions.
        unsafe {
            libc::atexit(cleanup_at_exit);
        }
    });
}

/// Sends SIGTERM to `pids`, then SIGKILL to those still alive after `grace` (a zero grace: to
/// all of them right after).
fn terminate(pids: &[u32], grace: Duration) {
    for &pid in pids {
        // SAFETY: kill(2) with a pid we started; a stale pid at worst returns ESRCH.
        unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    }
    let deadline = Instant::now() + grace;
    let mut alive: Vec<u32> = pids.to_vec();
    while !alive.is_empty() && Instant::now() < deadline {
        alive.retain(|&pid| !reaped(pid));
        std::thread::sleep(Duration::from_millis(50));
    }
    for pid in alive {
        // SAFETY: as above.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        let _ = reaped_blocking(pid);
    }
}

fn reaped(pid: u32) -> bool {
    let mut status = 0;
    // SAFETY: waitpid on our own child with WNOHANG.
    let r = unsafe { libc::waitpid(pid as i32, &mut status, libc::WNOHANG) };
    r == pid as i32 || r == -1
}

fn reaped_blocking(pid: u32) -> bool {
    let mut status = 0;
    // SAFETY: waitpid on our own child, which was just sent SIGKILL.
    unsafe { libc::waitpid(pid as i32, &mut status, 0) == pid as i32 }
}

fn spawner() -> &'static Mutex<mpsc::Sender<SpawnRequest>> {
    SPAWNER.get_or_init(|| {
        install_atexit();
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("nmo-devcluster-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    // SAFETY: the closure only calls async-signal-safe prctl(2) and getppid(2).
                    unsafe {
                        cmd.pre_exec(|| {
                            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                                return Err(io::Error::last_os_error());
                            }
                            Ok(())
                        });
                    }
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("the spawner thread starts");
        Mutex::new(tx)
    })
}

/// Registers a directory to be removed at exit (and by [`forget_dir`] when removed earlier).
pub(crate) fn register_dir(dir: &Path) {
    install_atexit();
    REGISTRY
        .lock()
        .expect("registry lock")
        .dirs
        .push(dir.to_path_buf());
}

/// Removes a directory from the exit list once it has been removed.
pub(crate) fn forget_dir(dir: &Path) {
    REGISTRY
        .lock()
        .expect("registry lock")
        .dirs
        .retain(|d| d != dir);
}

/// A child process whose stdout and stderr go to a log file, killed when dropped.
pub struct Child {
    name: String,
    child: std::process::Child,
    log: PathBuf,
}

impl Child {
    /// Starts `cmd` with output appended to `log`, from the spawner thread.
    ///
    /// # Errors
    /// The log file cannot be created, or the program cannot be started (missing binary).
    pub fn spawn(name: &str, mut cmd: Command, log: &Path) -> io::Result<Child> {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)?;
        cmd.stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out);
        let (tx, rx) = mpsc::channel();
        spawner()
            .lock()
            .expect("spawner lock")
            .send((cmd, tx))
            .map_err(io::Error::other)?;
        let child = rx.recv().map_err(io::Error::other)??;
        REGISTRY
            .lock()
            .expect("registry lock")
            .pids
            .push(child.id());
        Ok(Child {
            name: name.to_string(),
            child,
            log: log.to_path_buf(),
        })
    }

    /// The component's name, as used in messages.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The operating-system process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Where stdout and stderr go.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// `Some(status)` when the process has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// The last `lines` lines of the log, for error messages.
    pub fn log_tail(&self, lines: usize) -> String {
        tail(&self.log, lines)
    }

    /// Sends `signal` (e.g. `libc::SIGKILL`, `libc::SIGTERM`) without waiting.
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.pid() as i32, signal) };
    }

    /// SIGKILL and reap: the abrupt end a crash or an OOM kill gives.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.deregister();
    }

    /// SIGTERM, then SIGKILL after `grace`; returns the exit status if the process ended by itself.
    pub fn stop(&mut self, grace: Duration) -> Option<std::process::ExitStatus> {
        self.signal(libc::SIGTERM);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Some(status) = self.exited() {
                self.deregister();
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill();
        None
    }

    fn deregister(&self) {
        let pid = self.pid();
        if let Ok(mut r) = REGISTRY.lock() {
            r.pids.retain(|p| *p != pid);
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if self.exited().is_none() {
            self.stop(Duration::from_secs(3));
        }
        self.deregister();
    }
}

/// The last `lines` lines of a text file (empty when unreadable).
pub fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
