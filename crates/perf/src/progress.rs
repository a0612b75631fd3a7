//! Progress lines on stderr, once a second, while a run is under way.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often progress is printed.
const PROGRESS_INTERVAL: Duration = Duration::from_secs(1);
/// How often the printer checks whether to stop (keeps `stop` prompt).
const STOP_POLL: Duration = Duration::from_millis(50);

/// A running progress printer; stopped by [`Progress::stop`].
pub struct Progress {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<()>,
}

impl Progress {
    /// Prints `[t s] <line()>` every second.
    pub fn start(line: impl Fn() -> String + Send + 'static) -> Progress {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::spawn(move || {
            let started = Instant::now();
            let mut next = started + PROGRESS_INTERVAL;
            while !flag.load(Ordering::Relaxed) {
                if Instant::now() >= next {
                    eprintln!("[{:>5.1}s] {}", started.elapsed().as_secs_f64(), line());
                    next += PROGRESS_INTERVAL;
                }
                std::thread::sleep(STOP_POLL);
            }
        });
        Progress { stop, handle }
    }

    /// Stops the printer and waits for it.
    pub fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.handle.join();
    }
}
