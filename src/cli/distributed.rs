//! `mpirun -np N webgpu-amp train ...`: joining a data-parallel job (cargo feature `mpi`).
//!
//! A process started by an MPI launcher (Open MPI's `mpirun`, or any launcher that sets
//! `PMI_SIZE` / `PMIX_SIZE`) becomes one rank of the job: it initialises MPI, picks its
//! adapter by its rank on the machine (unless `--adapter` names one), and trains its shard of
//! every global batch ([`webgpu_amp::train::Run::distribute`]). An error on any rank ends
//! the whole job (`MPI_Abort`) with the message, printed by rank 0 when it can take it.
//! A binary built without the feature refuses to run under a launcher with more than one
//! process instead of training N independent copies.

use std::rc::Rc;

use clap::Args;
use webgpu_amp::dist::Collective;
use webgpu_amp::{Error, GpuContext, GpuOptions, Result};

use super::numbers::number;

/// Flags of data-parallel runs.
#[derive(Args, Clone, Debug)]
pub struct DistArgs {
    /// Under mpirun: seconds any collective (the gradient all-reduce, say) may take before
    /// the job is ended as stuck (> 0, at most 604800: a week).
    #[arg(long, default_value_t = 120.0, allow_negative_numbers = true,
          value_parser = number::<f64>(TIMEOUT_RANGE))]
    pub collective_timeout: f64,
}

/// `--collective-timeout`, in seconds.
const TIMEOUT_RANGE: &str = "> 0 and at most 604800 seconds";
const MAX_TIMEOUT_SECS: f64 = 604_800.0;

impl DistArgs {
    /// The collective timeout, checked against its range (also without a launcher, so a
    /// typo fails the same on one machine as under mpirun).
    pub fn timeout(&self) -> Result<std::time::Duration> {
        let t = self.collective_timeout;
        if !(t > 0.0 && t <= MAX_TIMEOUT_SECS) {
            return Err(Error::InvalidArgument(format!(
                "--collective-timeout must be {TIMEOUT_RANGE}, got {t:?}"
            )));
        }
        Ok(std::time::Duration::from_secs_f64(self.collective_timeout))
    }
}

/// This process's place in a data-parallel job.
pub struct Joined {
    pub collective: Rc<dyn Collective>,
    local_rank: usize,
    #[cfg(feature = "mpi")]
    world: Rc<webgpu_amp::dist::mpi::MpiWorld>,
}

/// Join the job this process was launched into, if any: `None` for a plain process.
pub fn join(args: &DistArgs) -> Result<Option<Joined>> {
    join_launched(args, webgpu_amp::dist::launched_size())
}

/// [`join`] for a process the launcher started as one of `launched` (`None`: no launcher).
fn join_launched(args: &DistArgs, launched: Option<usize>) -> Result<Option<Joined>> {
    let Some(size) = launched else {
        return Ok(None);
    };
    let timeout = args.timeout()?;
    #[cfg(feature = "mpi")]
    {
        let _ = size;
        let world = Rc::new(webgpu_amp::dist::mpi::MpiWorld::init(timeout)?);
        Ok(Some(Joined {
            collective: world.clone(),
            local_rank: world.local_rank(),
            world,
        }))
    }
    #[cfg(not(feature = "mpi"))]
    {
        let _ = timeout;
        if size > 1 {
            return Err(Error::InvalidArgument(format!(
                "started by an MPI launcher as one of {size} processes, but this webgpu-amp was \
                 built without the `mpi` feature: each process would train alone. Build it with \
                 `cargo build --release --features mpi` (needs Open MPI: see docs/guide/distributed.md)"
            )));
        }
        Ok(None)
    }
}

impl Joined {
    /// Whether this rank prints the summary and writes metrics (rank 0).
    pub fn is_writer(&self) -> bool {
        self.collective.rank() == 0
    }

    /// This rank's device: the adapter `--adapter` names, else the one at this rank's index
    /// on its machine among the adapters of the selected backend (the best kind present:
    /// discrete GPUs before integrated ones before software ones), wrapping around when
    /// there are more ranks than adapters.
    pub fn context(&self, options: &GpuOptions) -> Result<GpuContext> {
        let ctx = if options.adapter.is_some() {
            GpuContext::new(options)?
        } else {
            let adapters = pollster::block_on(webgpu_amp::gpu::enumerate_adapters(options.backend));
            let kinds: Vec<(wgpu::Backend, wgpu::DeviceType)> = adapters
                .iter()
                .map(|a| {
                    let info = a.get_info();
                    (info.backend, info.device_type)
                })
                .collect();
            let pick = pick_adapter(&kinds, self.local_rank).ok_or_else(|| Error::NoAdapter {
                backend: options.backend.name().into(),
                adapter: String::new(),
            })?;
            let adapter = adapters.into_iter().nth(pick).expect("picked index");
            pollster::block_on(GpuContext::from_adapter(
                adapter,
                options.f16_storage,
                options.tensor_cores,
            ))?
        };
        eprintln!(
            "webgpu-amp: rank {} of {} on {} ({})",
            self.collective.rank(),
            self.collective.size(),
            ctx.report.name,
            ctx.report.backend
        );
        Ok(ctx)
    }

    /// End the job because this rank failed (see [`webgpu_amp::dist::mpi::MpiWorld::fail`]).
    pub fn fail(&self, message: &str) -> ! {
        #[cfg(feature = "mpi")]
        self.world.fail(message);
        #[cfg(not(feature = "mpi"))]
        {
            eprintln!("error: {message}");
            std::process::exit(1)
        }
    }
}

/// Index into `adapters` for local rank `local_rank`: among the adapters of the first
/// backend that has one of the best device type present, the `local_rank % count`-th.
fn pick_adapter(
    adapters: &[(wgpu::Backend, wgpu::DeviceType)],
    local_rank: usize,
) -> Option<usize> {
    let rank_of = |t: wgpu::DeviceType| match t {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Cpu => 3,
        wgpu::DeviceType::Other => 4,
    };
    let best = adapters.iter().map(|a| rank_of(a.1)).min()?;
    let backend = adapters.iter().find(|a| rank_of(a.1) == best)?.0;
    let candidates: Vec<usize> = adapters
        .iter()
        .enumerate()
        .filter(|(_, a)| a.0 == backend && rank_of(a.1) == best)
        .map(|(i, _)| i)
        .collect();
    Some(candidates[local_rank % candidates.len()])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without the feature, a launcher with several processes is refused (each would train
    /// alone); one process, or no launcher, trains as usual.
    #[cfg(not(feature = "mpi"))]
    #[test]
    fn without_the_feature_several_ranks_are_refused() {
        let args = DistArgs {
            collective_timeout: 120.0,
        };
        let err = join_launched(&args, Some(2)).err().expect("refused");
        assert!(err.to_string().contains("--features mpi"), "{err}");
        assert!(join_launched(&args, Some(1)).unwrap().is_none());
        assert!(join_launched(&args, None).unwrap().is_none());
    }

    #[test]
    fn a_bad_collective_timeout_is_refused() {
        for t in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let args = DistArgs {
                collective_timeout: t,
            };
            assert!(join_launched(&args, Some(2)).is_err(), "{t}");
        }
    }

    #[test]
    fn ranks_spread_over_the_best_adapters_of_one_backend() {
        use wgpu::{Backend::*, DeviceType::*};
        let adapters = [
            (Vulkan, Cpu),
            (Vulkan, DiscreteGpu),
            (Vulkan, IntegratedGpu),
            (Gl, DiscreteGpu),
            (Vulkan, DiscreteGpu),
        ];
        let picks: Vec<usize> = (0..4)
            .map(|r| pick_adapter(&adapters, r).unwrap())
            .collect();
        assert_eq!(picks, [1, 4, 1, 4]);
        let software = [(Vulkan, Cpu), (Gl, Cpu)];
        assert_eq!(pick_adapter(&software, 0), Some(0));
        assert_eq!(pick_adapter(&software, 1), Some(0));
        assert_eq!(pick_adapter(&[], 0), None);
    }
}
