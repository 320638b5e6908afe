//! [`CloudLatency`]: the latency and bandwidth of a cloud service as one function sees them,
//! which `--emulate` adds to what runs on one machine (`mlless_store`'s `EmulatedChannel` and
//! `Store::with_latency`) and the cost model projects a channel by.
//!
//! # Defaults, from public figures
//!
//! | name | request | bandwidth | reads at once | source |
//! | --- | --- | --- | --- | --- |
//! | `s3` | 20 ms | 75 MB/s | 32 | small-object GET/PUT from Lambda in the same region: 10–30 ms (Pu et al., *Shuffling, Fast and Slow*, NSDI 2019; Klimovic et al., *Pocket*, OSDI 2018); a Lambda function's network ≈ 600 Mbit/s (Pocket); the object-store channel's concurrent GETs |
//! | `elasticache` | 0.3 ms | 75 MB/s | all | a Redis round trip from Lambda to ElastiCache in the same AZ: 0.2–0.5 ms (AWS ElastiCache documentation, Pocket); the same function network; one `XREAD` returns a step's messages |
//! | `dynamodb` | 5 ms | 75 MB/s | all | a DynamoDB `GetItem`/`PutItem`/`Query` from Lambda in the same region: single-digit milliseconds (AWS's DynamoDB documentation and product page, "single-digit millisecond performance"); LambdaML (Jiang et al., SIGMOD 2021) measured it about 20% faster than S3 a step for LR on Higgs; the same function network; one `Query` returns a step's messages (chunked messages above 400 KB cost more requests, which the model does not count) |
//!
//! A file of the same shape gives other figures (`--emulate my-cloud.toml`):
//!
//! ```toml
//! name = "my-cloud"
//! request_ms = 5.0
//! mb_per_s = 100.0
//! reads_at_once = 32   # optional: without it one request reads all of a collect's messages
//! ```
//!

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The latency and bandwidth of a cloud service, as one function sees them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CloudLatency {
    /// A name for tables and messages (`s3`, `elasticache`, a file's own).
    pub name: String,
    /// Time to first byte of one request, in milliseconds.
    pub request_ms: f64,
    /// Bandwidth between a function and the service, in MB/s (10⁶ bytes per second).
    pub mb_per_s: f64,
    /// How many messages a function reads with one request's latency when it collects several
    /// (requests in flight at once); `None`: one request reads them all.
    #[serde(default)]
    pub reads_at_once: Option<u32>,
}

/// Why a [`CloudLatency`] could not be had.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EmulateError {
    /// The name is no built-in and no readable file.
    #[error("cannot read the latency file {path}: {source} (built-in: s3, elasticache, dynamodb)")]
    Read {
        /// The file tried.
        path: String,
        /// Why it could not be read.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a latency table.
    #[error("{path} is not a latency table (name, request_ms, mb_per_s): {reason}")]
    Parse {
        /// The file.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl CloudLatency {
    /// S3 as a Lambda function in the same region sees it: 20 ms a request, 75 MB/s.
    pub fn s3() -> CloudLatency {
        CloudLatency {
            name: "s3".into(),
            request_ms: 20.0,
            mb_per_s: 75.0,
            reads_at_once: Some(32),
        }
    }

    /// ElastiCache (Redis) in the same availability zone: 0.3 ms a request, 75 MB/s.
    pub fn elasticache() -> CloudLatency {
        CloudLatency {
            name: "elasticache".into(),
            request_ms: 0.3,
            mb_per_s: 75.0,
            reads_at_once: None,
        }
    }

    /// A parameter server (`mlless ps`) on a VM in the functions' region: 0.3 ms a request (a
    /// round trip within a region), 75 MB/s (a function's network, not the VM's, is the
    /// narrower pipe).
    pub fn ps() -> CloudLatency {
        CloudLatency {
            name: "ps".into(),
            request_ms: 0.3,
            mb_per_s: 75.0,
            reads_at_once: None,
        }
    }

    /// DynamoDB in the same region: 5 ms a request, 75 MB/s; one `Query` reads a step's
    /// messages.
    pub fn dynamodb() -> CloudLatency {
        CloudLatency {
            name: "dynamodb".into(),
            request_ms: 5.0,
            mb_per_s: 75.0,
            reads_at_once: None,
        }
    }

    /// A built-in (`s3`, `elasticache`, `ps`, `dynamodb`) or a TOML file of the same fields.
    pub fn by_name_or_file(name: &str) -> Result<CloudLatency, EmulateError> {
        match name {
            "s3" => return Ok(CloudLatency::s3()),
            "elasticache" => return Ok(CloudLatency::elasticache()),
            "ps" => return Ok(CloudLatency::ps()),
            "dynamodb" => return Ok(CloudLatency::dynamodb()),
            _ => {}
        }
        let text = std::fs::read_to_string(name).map_err(|source| EmulateError::Read {
            path: name.into(),
            source,
        })?;
        CloudLatency::from_toml_str(&text).map_err(|reason| EmulateError::Parse {
            path: name.into(),
            reason,
        })
    }

    /// Parses and checks a latency table in TOML.
    pub fn from_toml_str(text: &str) -> Result<CloudLatency, String> {
        let latency: CloudLatency = toml::from_str(text).map_err(|e| e.to_string())?;
        if !(latency.request_ms.is_finite() && latency.request_ms >= 0.0) {
            return Err(format!(
                "request_ms must be 0 or more, got {}",
                latency.request_ms
            ));
        }
        if !(latency.mb_per_s.is_finite() && latency.mb_per_s > 0.0) {
            return Err(format!(
                "mb_per_s must be more than 0, got {}",
                latency.mb_per_s
            ));
        }
        if latency.reads_at_once == Some(0) {
            return Err("reads_at_once must be 1 or more".into());
        }
        Ok(latency)
    }

    /// The time of one request that moves `bytes`.
    pub fn request(&self, bytes: usize) -> Duration {
        self.requests(1, bytes)
    }

    /// The time of a read of `messages` messages of `bytes` in all: the requests one after the
    /// other that [`reads_at_once`](Self::reads_at_once) makes of them, and the bytes.
    pub fn read(&self, messages: usize, bytes: usize) -> Duration {
        let rounds = match self.reads_at_once {
            Some(k) => messages.div_ceil(k.max(1) as usize).max(1),
            None => 1,
        };
        self.requests(rounds, bytes)
    }

    fn requests(&self, rounds: usize, bytes: usize) -> Duration {
        Duration::from_secs_f64(
            rounds as f64 * self.request_ms / 1e3 + bytes as f64 / (self.mb_per_s * 1e6),
        )
    }

    /// The same cloud on a clock `factor` times slower: every wait `factor` times longer. A
    /// simulation on tokio's timer, which counts whole milliseconds, runs on such a clock so
    /// that its milliseconds stand for microseconds.
    pub fn slowed(&self, factor: f64) -> CloudLatency {
        CloudLatency {
            request_ms: self.request_ms * factor,
            mb_per_s: self.mb_per_s / factor,
            ..self.clone()
        }
    }
}
