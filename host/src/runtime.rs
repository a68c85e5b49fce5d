//! The runtime statements execute on, apart from the one serving HTTP: a
//! statement that never yields cannot stall requests, and shutting the
//! service down never blocks inside another runtime.

/// The stack of every runtime thread lakehost plans and runs statements on:
/// 8 MiB, four times tokio's default. The expression caps
/// (`expression_limits`) are sized so that the deepest statement they pass
/// plans and runs on 2 MiB (tested on the test runtime's default stacks);
/// the rest is margin for what no cap foresaw. Address space only: pages
/// are committed as a thread touches them.
pub const THREAD_STACK_BYTES: usize = 8 * 1024 * 1024;

/// The cores this process may use, read once: `available_parallelism` reads
/// the cgroup's quota files on Linux, too slow to ask again per query.
pub fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(2, usize::from))
}

/// A multi-thread tokio runtime sized for `workers` concurrent statements.
pub struct EngineRuntime(Option<tokio::runtime::Runtime>);

impl EngineRuntime {
    /// One thread per core for each worker: a query keeps up to one thread
    /// per core busy, and one query that never yields must not hold the
    /// threads another worker's query needs; the OS shares the cores.
    pub fn new(workers: usize) -> std::io::Result<Self> {
        let cores = cores();
        let threads = (cores * workers).clamp(cores, 64);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name("lakehost-query")
            .thread_stack_size(THREAD_STACK_BYTES)
            .enable_all()
            .build()?;
        Ok(Self(Some(runtime)))
    }

    pub fn handle(&self) -> &tokio::runtime::Handle {
        self.0.as_ref().expect("runtime lives until drop").handle()
    }
}

impl Drop for EngineRuntime {
    fn drop(&mut self) {
        // Dropping a runtime blocks, which is not allowed inside another
        // runtime (tests drop the service from async code).
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}
