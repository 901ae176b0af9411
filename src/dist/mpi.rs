//! [`Collective`] over MPI (the `mpi` crate on the system's Open MPI), feature `mpi`.
//!
//! Every collective is started nonblocking and completed in a test loop, never in a blocking
//! MPI wait, so a job cannot hang:
//! - a rank that fails reports its error to rank 0 (a small tagged message) and ends the job
//!   with `MPI_Abort`; rank 0, testing for such reports while it waits in a collective,
//!   prints the failing rank's message (and which checkpoint is intact) and aborts the job;
//! - a collective that does not complete within the timeout (a rank stuck in a driver, or
//!   one that died in a way the launcher missed) ends the job with a message that names it;
//! - a rank that is killed outright is noticed by the launcher (`mpirun`), which ends the
//!   others (SIGTERM, then SIGKILL) and says which rank died and how; rank 0 catches the
//!   SIGTERM and says, before it goes, that the job was ended and which checkpoint is intact.
//!
//! The host waits in this module (and nowhere else for MPI): in each collective's test loop,
//! after the overlapped host work has run. Calls come from the main thread only (MPI's
//! `Threading::Single`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mpi::collective::SystemOperation;
use mpi::point_to_point::{Destination, Source};
use mpi::request::{Request, Scope};
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::traits::*;

use super::{Collective, Overlap};
use crate::error::{Error, Result};

/// Tag of the failure reports ranks send to rank 0.
const FAULT_TAG: i32 = 0xfa17;
/// How long a failing rank lets rank 0 report its message before it aborts the job itself.
const REPORT_GRACE: Duration = Duration::from_secs(3);
/// Default limit on one collective, from its start to its completion.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// MPI_COMM_WORLD of this job. Dropping it finalises MPI.
pub struct MpiWorld {
    world: SimpleCommunicator,
    local_rank: usize,
    local_size: usize,
    timeout: Duration,
    library: String,
    note: Arc<Mutex<String>>,
    // Declared last: MPI is finalised after the communicators above are freed.
    _universe: mpi::environment::Universe,
}

impl MpiWorld {
    /// Initialise MPI (once per process). `timeout` bounds every collective.
    pub fn init(timeout: Duration) -> Result<Self> {
        let universe = mpi::initialize().ok_or_else(|| {
            Error::Distributed("MPI could not be initialised (or was already)".into())
        })?;
        let world = universe.world();
        // Ranks on this machine share a node-local communicator: the local rank picks the
        // adapter.
        let local = world.split_shared(world.rank());
        let library = mpi::environment::library_version()
            .map(|v| v.lines().next().unwrap_or("").trim().to_string())
            .unwrap_or_else(|_| "MPI".into());
        let library = library
            .split(',')
            .next()
            .unwrap_or("MPI")
            .trim()
            .to_string();
        let note = Arc::new(Mutex::new(String::new()));
        if world.rank() == 0 {
            watch_for_termination(note.clone());
        }
        Ok(Self {
            local_rank: local.rank() as usize,
            local_size: local.size() as usize,
            world,
            timeout,
            library,
            note,
            _universe: universe,
        })
    }

    /// This rank's index among the ranks on its machine.
    pub fn local_rank(&self) -> usize {
        self.local_rank
    }

    /// Ranks on this machine.
    pub fn local_size(&self) -> usize {
        self.local_size
    }

    /// End the whole job because this rank failed with `message`: print it, report it to
    /// rank 0 (which prints it with the run's state and aborts the job), then abort. Never
    /// returns and never hangs: if rank 0 cannot take the report within a few seconds, this
    /// rank aborts the job itself.
    pub fn fail(&self, message: &str) -> ! {
        FAILING.store(true, Ordering::Release);
        let (rank, size) = (self.world.rank(), self.world.size());
        if rank == 0 {
            eprintln!("error: {message}{}", self.note_suffix());
            eprintln!("error: rank 0 of {size} failed; ending the job");
            self.world.abort(1);
        }
        eprintln!("error (rank {rank} of {size}): {message}");
        let text = message.as_bytes().to_vec();
        let start = Instant::now();
        mpi::request::scope(|scope| {
            let mut req =
                self.world
                    .process_at_rank(0)
                    .immediate_send_with_tag(scope, &text[..], FAULT_TAG);
            loop {
                match req.test() {
                    Ok(_) => break,
                    Err(r) => req = r,
                }
                if start.elapsed() > REPORT_GRACE {
                    eprintln!(
                        "error (rank {rank} of {size}): rank 0 did not take the report; ending the job"
                    );
                    self.world.abort(1);
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        // Rank 0 aborts the job when it sees the report; give it the time to, then do it here.
        while start.elapsed() < REPORT_GRACE {
            std::thread::sleep(Duration::from_millis(10));
        }
        self.world.abort(1)
    }

    fn note_suffix(&self) -> String {
        note_suffix(&self.note)
    }

    /// Rank 0: a failure report from another rank ends the job here, with its message.
    fn check_reports(&self) {
        if self.world.rank() != 0 {
            return;
        }
        if let Some(probed) = self
            .world
            .any_process()
            .immediate_matched_probe_with_tag(FAULT_TAG)
        {
            let (bytes, status) = probed.matched_receive_vec::<u8>();
            eprintln!(
                "error: rank {} of {} failed: {}{}",
                status.source_rank(),
                self.world.size(),
                String::from_utf8_lossy(&bytes),
                self.note_suffix()
            );
            eprintln!("error: ending the job (every rank stops)");
            FAILING.store(true, Ordering::Release);
            self.world.abort(1);
        }
    }

    /// Complete `req`, testing for failure reports and the timeout meanwhile.
    fn wait<'a, D: ?Sized, S: Scope<'a>>(&self, mut req: Request<'a, D, S>, what: &str) {
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            match req.test() {
                Ok(_) => return,
                Err(r) => req = r,
            }
            self.check_reports();
            if start.elapsed() > self.timeout {
                self.fail(&format!(
                    "{what} did not complete within {} s (another rank is stuck or gone; \
                     the limit is --collective-timeout)",
                    self.timeout.as_secs_f64()
                ));
            }
            // Spin briefly (a reduction of a few hundred kB completes in microseconds), then
            // sleep in growing steps up to 200 µs, so a waiting rank leaves the CPU to ranks
            // that share it.
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                let us = (1u64 << ((spins - 64) / 8).min(8)).min(200);
                std::thread::sleep(Duration::from_micros(us));
            }
        }
    }
}

impl Collective for MpiWorld {
    fn rank(&self) -> usize {
        self.world.rank() as usize
    }

    fn size(&self) -> usize {
        self.world.size() as usize
    }

    fn describe(&self) -> String {
        self.library.clone()
    }

    fn all_reduce_sum_f32(&self, send: &[f32], recv: &mut [f32], overlap: Overlap) -> Result<()> {
        if send.len() != recv.len() {
            return Err(Error::Distributed(format!(
                "all-reduce of {} values into {}",
                send.len(),
                recv.len()
            )));
        }
        mpi::request::scope(|scope| {
            let req =
                self.world
                    .immediate_all_reduce_into(scope, send, recv, SystemOperation::sum());
            overlap();
            self.wait(req, "the all-reduce of the gradients");
        });
        Ok(())
    }

    fn all_reduce_sum_f64(&self, values: &mut [f64]) -> Result<()> {
        let send = values.to_vec();
        mpi::request::scope(|scope| {
            let req = self.world.immediate_all_reduce_into(
                scope,
                &send[..],
                values,
                SystemOperation::sum(),
            );
            self.wait(req, "an all-reduce of sums");
        });
        Ok(())
    }

    fn any(&self, flag: bool) -> Result<bool> {
        let send = [flag as i32];
        let mut recv = [0i32];
        mpi::request::scope(|scope| {
            let req = self.world.immediate_all_reduce_into(
                scope,
                &send[..],
                &mut recv[..],
                SystemOperation::logical_or(),
            );
            self.wait(req, "the all-reduce of found_inf");
        });
        Ok(recv[0] != 0)
    }

    fn broadcast_f32(&self, values: &mut [f32]) -> Result<()> {
        mpi::request::scope(|scope| {
            let req = self
                .world
                .process_at_rank(0)
                .immediate_broadcast_into(scope, values);
            self.wait(req, "the broadcast of rank 0's parameters");
        });
        Ok(())
    }

    fn all_gather_u64(&self, value: u64) -> Result<Vec<u64>> {
        let send = [value];
        let mut recv = vec![0u64; self.size()];
        mpi::request::scope(|scope| {
            let req = self
                .world
                .immediate_all_gather_into(scope, &send[..], &mut recv[..]);
            self.wait(req, "an all-gather");
        });
        Ok(recv)
    }

    fn set_failure_note(&self, note: String) {
        if let Ok(mut n) = self.note.lock() {
            *n = note;
        }
    }
}

fn note_suffix(note: &Mutex<String>) -> String {
    match note.lock() {
        Ok(n) if !n.is_empty() => format!("; {n}"),
        _ => String::new(),
    }
}

/// Set when this process ends the job itself (its own message is already out).
static FAILING: AtomicBool = AtomicBool::new(false);

/// Rank 0: when the launcher ends the job (SIGTERM: another rank was killed or crashed, or
/// the user cancelled), say so with the run's checkpoint note, then exit at once (143, as a
/// SIGTERM death; 130 for a SIGINT sent to rank 0 itself). The process's one signal handler ([`crate::interrupt`]) records the
/// signal and a thread here watches for it, so nothing but an atomic swap runs in the
/// handler. (A data-parallel job does not stop gracefully: its ranks would have to agree on
/// the step, and the launcher kills them soon after.)
fn watch_for_termination(note: Arc<Mutex<String>>) {
    crate::interrupt::install();
    let spawned = std::thread::Builder::new()
        .name("mpi-sigterm".into())
        .spawn(move || {
            let signal = loop {
                std::thread::sleep(Duration::from_millis(20));
                if let Some(signal) = crate::interrupt::received() {
                    break signal;
                }
            };
            if !FAILING.load(Ordering::Acquire) {
                eprintln!(
                    "error: rank 0: the MPI launcher is ending the job (another rank died or was \
                     killed: the launcher's message names it){}",
                    note_suffix(&note)
                );
            }
            let code = match signal {
                crate::interrupt::Signal::Term => 143,
                crate::interrupt::Signal::Int => crate::interrupt::EXIT_CODE.into(),
            };
            // SAFETY: ends the process without running exit handlers (MPI's could block on
            // the dead rank).
            unsafe { libc::_exit(code) }
        });
    if spawned.is_err() {
        eprintln!(
            "webgpu-amp: rank 0 could not start its SIGTERM watcher; a killed rank still ends the job"
        );
    }
}
