//! The exchange of one step in a cloud, from the latency and bandwidth of its channel: what a
//! projection of a run onto a FaaS platform takes for the exchange, instead of the exchange
//! the run measured on the machine it ran on.
//!
//! # The model
//!
//! The same request model as the latency emulation (`mlless_store::CloudLatency`, which
//! `--emulate` and `bench cloud` use): a request costs the service's time to first byte `r`
//! plus its bytes at the function's bandwidth; a collect of `n` messages costs `⌈n / k⌉`
//! requests one after the other where a function reads `k` at once (an object store), one
//! where one read returns them all (a Redis stream). Decoding and adding a received message is
//! CPU work, `cpu` per byte received. With `s` the bytes a worker sends a step and `u` the
//! bytes of the mean of P updates, the critical path of one step is:
//!
//! ```text
//! broadcast:       publish (r + s) · collect P messages (reads(P)·r + P·s) · decode P·s
//! all-reduce:      publish (r + s) · the leader collects P (reads(P)·r + P·s), decodes P·s,
//!                  publishes the mean (r + u) · the others read it (r + u), decode u
//! scatter-reduce:  publish P chunks of s/P (⌈P/32⌉·r + s) · collect P chunks (reads(P)·r + s),
//!                  decode s · publish the mean chunk (r + u/P) · collect P mean chunks
//!                  (reads(P)·r + u), decode u
//! ```
//!
//! (bytes read as time at the bandwidth), plus [`CPU_MS_PER_MESSAGE`] for each message on the
//! path (P + 1 for broadcast and all-reduce, 3P + 1 for scatter-reduce). For sparse updates the
//! mean of P updates is their union: each touching a fraction `f` of the model's `N`
//! coordinates at random, the union touches `N·(1 − (1 − f)^P)` (at most the dense model's
//! size); for dense ones `u = s`. On MovieLens-20M-shaped PMF at P = 12 this predicted 1.2 MB
//! for the 1.17 MB the simulation's workers received.
//!
//! What it leaves out, as the emulation does: the gap a poller of an object store leaves between
//! a message landing and its next look, a server's own limits (one Redis instance serving
//! hundreds of functions), stragglers.

use serde::{Deserialize, Serialize};

/// CPU time to decode and add one byte of a received update, ms: 4 ns a byte, what `bench
/// cloud`'s simulated functions spent decoding and averaging MovieLens-20M-shaped PMF updates
/// (1.2 MB received a step) beyond the requests' latency.
pub const DECODE_MS_PER_BYTE: f64 = 4e-6;

/// Bytes of one entry of a sparse update on the wire (an index and an f32 value), for the
/// share of the model's coordinates an update touches.
pub const SPARSE_ENTRY_BYTES: f64 = 6.0;

/// CPU time a function spends on each message it sends or receives besides its bytes (building
/// or parsing a request, allocating, framing), ms: 5 µs, a Redis or S3 client's own work per
/// message. `bench cloud` charges its simulated functions more than this at large P (its
/// in-process channel and timers are CPU on the same thread); its table shows by how much.
pub const CPU_MS_PER_MESSAGE: f64 = 0.005;

/// How many messages a worker publishes at once in a scatter-reduce (the runtime's own
/// concurrency).
pub const PUBLISH_CONCURRENCY: u32 = 32;

/// The latency and bandwidth of a cloud channel as one function sees it: the figures of
/// `mlless_store::CloudLatency` (`--emulate`), which this crate does not depend on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServiceLatency {
    /// The service's name (`s3`, `elasticache`, a file's own).
    pub name: String,
    /// Time to first byte of one request, ms.
    pub request_ms: f64,
    /// Bandwidth between a function and the service, MB/s (10⁶ bytes per second).
    pub mb_per_s: f64,
    /// Messages read with one request's latency (requests in flight at once); `None`: one
    /// request reads them all.
    pub reads_at_once: Option<u32>,
}

impl ServiceLatency {
    /// Requests one after the other to read `n` messages.
    fn reads(&self, n: u32) -> f64 {
        match self.reads_at_once {
            Some(k) if k > 0 => f64::from(n.div_ceil(k)),
            _ => 1.0,
        }
    }

    /// Time of `bytes` at the bandwidth, ms.
    fn transfer_ms(&self, bytes: f64) -> f64 {
        if self.mb_per_s > 0.0 {
            bytes / (self.mb_per_s * 1e3)
        } else {
            0.0
        }
    }
}

/// The communication pattern, as the model sees it (the job's `Pattern`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PatternShape {
    /// Every worker reads every other worker's update.
    Broadcast,
    /// A leader averages the updates and publishes the mean.
    AllReduce,
    /// Worker k averages chunk k of every update; everyone reads the averaged chunks.
    ScatterReduce,
    /// Parameter servers average the updates; every worker sends its own and reads the mean.
    Server,
}

impl PatternShape {
    /// Its name as `--pattern` takes it.
    pub fn name(self) -> &'static str {
        match self {
            PatternShape::Broadcast => "broadcast",
            PatternShape::AllReduce => "allreduce",
            PatternShape::ScatterReduce => "scatter-reduce",
            PatternShape::Server => "server",
        }
    }
}

/// What a step's updates weigh, enough to project its exchange to any P.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct UpdateSize {
    /// Bytes a worker sends a step (its whole update, encoded).
    pub bytes: f64,
    /// Bytes of the whole model as a dense update: what the mean of many sparse updates grows
    /// to at most.
    pub dense_bytes: f64,
    /// Whether updates are sparse (their mean is the union of their entries) rather than dense
    /// (the mean is as large as one update).
    pub sparse: bool,
    /// CPU time to decode and add one byte of a received message, ms.
    pub cpu_ms_per_byte: f64,
    /// CPU time per message sent or received besides its bytes, ms.
    pub cpu_ms_per_message: f64,
}

impl UpdateSize {
    /// The update of a worker that sent `sent` bytes a step on average under `pattern` among
    /// `workers`, for a model of `dense_bytes` as a dense update: sparse where that is under
    /// half the dense model, decoded at [`DECODE_MS_PER_BYTE`] and [`CPU_MS_PER_MESSAGE`]
    /// ([`UpdateSize::from_sent`]).
    pub fn measured(dense_bytes: f64, pattern: PatternShape, workers: u32, sent: f64) -> Self {
        UpdateSize {
            bytes: 0.0,
            dense_bytes,
            sparse: sent < dense_bytes / 2.0,
            cpu_ms_per_byte: DECODE_MS_PER_BYTE,
            cpu_ms_per_message: CPU_MS_PER_MESSAGE,
        }
        .from_sent(pattern, workers, sent)
    }

    /// The update of a worker that sent `sent` bytes a step on average in an exchange of
    /// `workers` under `pattern`, sparse or not and decoded as `self` says (its `bytes`
    /// ignored): under broadcast and through parameter servers what it sent; under the reducing
    /// patterns what it sent less
    /// its share of the means published (the leader's mean over P workers, or a scatter-reduce
    /// owner's chunk of it), `sent = s + u(s)/P`, solved by bisection (the left side grows with
    /// `s`).
    pub fn from_sent(self, pattern: PatternShape, workers: u32, sent: f64) -> UpdateSize {
        let sent = sent.max(0.0);
        let mut update = UpdateSize {
            bytes: sent,
            ..self
        };
        let publishes_means = match pattern {
            PatternShape::Broadcast | PatternShape::Server => false,
            PatternShape::AllReduce | PatternShape::ScatterReduce => true,
        };
        if publishes_means {
            let p = f64::from(workers.max(1));
            let (mut low, mut high) = (0.0, sent);
            for _ in 0..60 {
                update.bytes = (low + high) / 2.0;
                if update.bytes + update.mean_bytes(workers) / p > sent {
                    high = update.bytes;
                } else {
                    low = update.bytes;
                }
            }
        }
        update
    }

    /// Bytes of the mean of `workers` updates: the union of sparse ones (touching coordinates
    /// at random), at most the dense model.
    pub fn mean_bytes(&self, workers: u32) -> f64 {
        if !self.sparse {
            return self.bytes;
        }
        let dense = self.dense_bytes.max(self.bytes);
        // The model as sparse entries, and the fraction of it one update touches.
        let all = self.dense_bytes / 4.0 * SPARSE_ENTRY_BYTES;
        if all <= 0.0 {
            return self.bytes;
        }
        let touched = (self.bytes / all).clamp(0.0, 1.0);
        let union = 1.0 - (1.0 - touched).powi(i32::try_from(workers.max(1)).unwrap_or(i32::MAX));
        (union * all).clamp(self.bytes.min(dense), dense)
    }
}

/// The exchange of one step of `workers` workers in the cloud `latency` describes, ms on the
/// critical path (see the module documentation).
pub fn exchange_ms(
    pattern: PatternShape,
    latency: &ServiceLatency,
    workers: u32,
    update: &UpdateSize,
) -> f64 {
    let p = workers.max(1);
    let pf = f64::from(p);
    let r = latency.request_ms.max(0.0);
    let s = update.bytes.max(0.0);
    let u = update.mean_bytes(p);
    let t = |bytes: f64| latency.transfer_ms(bytes);
    let cpu = |bytes: f64| bytes * update.cpu_ms_per_byte.max(0.0);
    let messages = |n: f64| n * update.cpu_ms_per_message.max(0.0);
    match pattern {
        PatternShape::Broadcast => {
            r + t(s) + latency.reads(p) * r + t(pf * s) + cpu(pf * s) + messages(pf + 1.0)
        }
        PatternShape::AllReduce => {
            let leader = r + t(s) + latency.reads(p) * r + t(pf * s) + cpu(pf * s) + r + t(u);
            leader + latency.reads(1) * r + t(u) + cpu(u) + messages(pf + 1.0)
        }
        PatternShape::ScatterReduce => {
            let publish = f64::from(p.div_ceil(PUBLISH_CONCURRENCY)) * r + t(s);
            let reduce = latency.reads(p) * r + t(s) + cpu(s);
            let share = r + t(u / pf) + latency.reads(p) * r + t(u) + cpu(u);
            publish + reduce + share + messages(3.0 * pf + 1.0)
        }
        PatternShape::Server => {
            // The push, the servers' sum of the P updates once the last has landed, the pull.
            r + t(s) + cpu(pf * s) + t(u) + cpu(u) + messages(2.0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s3() -> ServiceLatency {
        ServiceLatency {
            name: "s3".into(),
            request_ms: 20.0,
            mb_per_s: 75.0,
            reads_at_once: Some(32),
        }
    }

    fn elasticache() -> ServiceLatency {
        ServiceLatency {
            name: "elasticache".into(),
            request_ms: 0.3,
            mb_per_s: 75.0,
            reads_at_once: None,
        }
    }

    fn dense(bytes: f64) -> UpdateSize {
        UpdateSize {
            bytes,
            dense_bytes: bytes,
            sparse: false,
            cpu_ms_per_byte: 0.0,
            cpu_ms_per_message: 0.0,
        }
    }

    #[test]
    fn an_update_is_what_was_sent_less_the_share_of_the_means() {
        let template = UpdateSize {
            bytes: 0.0,
            dense_bytes: 7_000_000.0,
            sparse: true,
            cpu_ms_per_byte: 0.0,
            cpu_ms_per_message: 0.0,
        };
        let broadcast = template.from_sent(PatternShape::Broadcast, 12, 110_000.0);
        assert_eq!(broadcast.bytes, 110_000.0);
        // What 12 workers sending 110 kB updates send on average under all-reduce.
        let sent = 110_000.0 + broadcast.mean_bytes(12) / 12.0;
        let reduced = template.from_sent(PatternShape::AllReduce, 12, sent);
        assert!((reduced.bytes - 110_000.0).abs() < 1.0, "{}", reduced.bytes);
        let dense = UpdateSize {
            sparse: false,
            ..template
        };
        let d = dense.from_sent(PatternShape::ScatterReduce, 4, 5_000.0);
        assert!((d.bytes - 4_000.0).abs() < 1e-6, "{}", d.bytes);
    }

    #[test]
    fn requests_alone_count_round_trips() {
        let tiny = dense(0.0);
        // Broadcast on S3 at P = 64: a publish and two rounds of 32 reads.
        assert!((exchange_ms(PatternShape::Broadcast, &s3(), 64, &tiny) - 60.0).abs() < 1e-9);
        // On a server one read returns every message: two round trips at any P.
        for p in [4, 64, 256] {
            let e = exchange_ms(PatternShape::Broadcast, &elasticache(), p, &tiny);
            assert!((e - 0.6).abs() < 1e-9, "P = {p}: {e}");
        }
        // All-reduce: publish, collect, publish the mean, read it.
        let e = exchange_ms(PatternShape::AllReduce, &s3(), 256, &tiny);
        assert!((e - 20.0 * (1.0 + 8.0 + 1.0 + 1.0)).abs() < 1e-9, "{e}");
        // Scatter-reduce: 8 rounds of chunk publishes, 8 of reads, a publish, 8 reads.
        let e = exchange_ms(PatternShape::ScatterReduce, &s3(), 256, &tiny);
        assert!((e - 20.0 * (8.0 + 8.0 + 1.0 + 8.0)).abs() < 1e-9, "{e}");
        // Parameter servers: one push and pull at any P.
        for p in [4, 256] {
            let e = exchange_ms(PatternShape::Server, &elasticache(), p, &tiny);
            assert!((e - 0.3).abs() < 1e-9, "P = {p}: {e}");
        }
    }

    #[test]
    fn parameter_servers_send_each_worker_one_mean() {
        // A dense update of 400 KB: a worker pushes one and pulls one whatever P.
        let update = dense(400_000.0);
        let server = exchange_ms(PatternShape::Server, &elasticache(), 64, &update);
        assert!(
            (server - (0.3 + 2.0 * 400_000.0 / 75e3)).abs() < 1e-9,
            "{server}"
        );
        let broadcast = exchange_ms(PatternShape::Broadcast, &elasticache(), 64, &update);
        assert!(broadcast > 30.0 * server, "{broadcast} against {server}");
        // What it sent is its update: the servers publish no mean of its making.
        assert_eq!(
            update.from_sent(PatternShape::Server, 64, 400_000.0).bytes,
            400_000.0
        );
    }

    #[test]
    fn bytes_favour_the_reducing_patterns_at_large_p() {
        // A dense update of 400 KB: broadcast reads P of them, scatter-reduce about two.
        let update = dense(400_000.0);
        let broadcast = exchange_ms(PatternShape::Broadcast, &elasticache(), 64, &update);
        let scatter = exchange_ms(PatternShape::ScatterReduce, &elasticache(), 64, &update);
        assert!(broadcast > 10.0 * scatter, "{broadcast} against {scatter}");
        // 65 updates of 400 KB at 75 MB/s: about 347 ms.
        assert!((broadcast - (0.6 + 65.0 * 400_000.0 / 75e3)).abs() < 1e-9);
    }

    #[test]
    fn a_sparse_mean_grows_to_the_dense_model_at_most() {
        let update = UpdateSize {
            bytes: 1_000.0,
            dense_bytes: 10_000.0,
            sparse: true,
            cpu_ms_per_byte: 1e-6,
            cpu_ms_per_message: 0.0,
        };
        // The model: 2,500 coordinates, 15,000 bytes as sparse entries; an update touches a
        // fifteenth. Four touch 1 − (14/15)^4 of it, below four times one; many, all of it
        // (capped at the dense 10,000 bytes).
        let four = 15_000.0 * (1.0 - (14.0_f64 / 15.0).powi(4));
        assert!(
            (update.mean_bytes(4) - four).abs() < 1e-9,
            "{}",
            update.mean_bytes(4)
        );
        assert!(update.mean_bytes(4) < 4_000.0);
        assert_eq!(update.mean_bytes(1), 1_000.0);
        assert_eq!(update.mean_bytes(64), 10_000.0);
        assert_eq!(dense(1_000.0).mean_bytes(64), 1_000.0);
        // Decoding is charged: the same exchange with free CPU is faster.
        let free = UpdateSize {
            cpu_ms_per_byte: 0.0,
            ..update
        };
        for shape in [
            PatternShape::Broadcast,
            PatternShape::AllReduce,
            PatternShape::ScatterReduce,
        ] {
            assert!(
                exchange_ms(shape, &elasticache(), 16, &update)
                    > exchange_ms(shape, &elasticache(), 16, &free)
            );
        }
    }
}
