//! The hybrid parameter server (LambdaML's fourth channel): [`PsServer`], a long-running server
//! a user starts on a VM (`mlless ps`), and [`PsChannel`], the [`Channel`] of functions that
//! exchange their updates through one or several of them (`--channel ps://:SECRET@host:port`).
//!
//! # Layout
//!
//! | module | what |
//! | --- | --- |
//! | [`wire`] | request and response frames over TCP (postcard in a checked, length-prefixed frame; why not gRPC) |
//! | [`server`] | [`PsServer`]: every job's messages and keys in memory, a lock and a wake-up per step, the limits |
//! | `means` | the server's averaging: each step's parts of the updates and their mean |
//! | `client` | one server's connections, its hello and boot id |
//! | this one | [`PsChannel`]: the URL, sharding over several servers |
//!
//! # Sharding
//!
//! With K servers (`ps://:S@h1:p1,ps://:S@h2:p2`), the message of (topic, step, worker) lives on
//! server `hash(topic, step, worker) % K` and a key on `hash(key) % K` (FNV-1a: the same in every
//! process); a collect asks every server holding wanted messages at once.
//!
//! # Averaging
//!
//! The servers average the workers' updates themselves
//! ([`Channel::publish_and_average`], the `server` pattern): each worker sends its update and
//! receives the mean, one request to each server whatever the fleet, where broadcast has it
//! read every peer's update. With K servers, server `k` averages the `k`-th range of the
//! parameters (a K-th of each update's bytes). Why the servers average rather than apply the
//! mean to a model of their own: see `means.rs`.
//!
//! # Faults
//!
//! A server that cannot be reached is a transient [`ChannelError::Backend`] naming it, which the
//! [`RetryingChannel`](crate::RetryingChannel) that [`open_channel`](crate::open_channel) wraps
//! around the channel retries until `--channel-grace` passes, then reports as
//! [`ChannelError::Unavailable`] naming the server. A server that comes back keeps serving if it
//! is the same process (its connections were cut); one that was restarted has a new boot id and
//! none of the run's messages, so every operation on it fails — not transient — rather than
//! reading an empty state as if it were the model: the run stops with that error and is resumed
//! from its checkpoint (`mlless train --resume`), which republishes what it needs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::future::{join_all, try_join_all};

use mlless_core::{SparseVector, WireDelta};

use crate::channel::Result;
use crate::channel::average::{Averaged, Share, encode_share, share_header};
use crate::channel::collect::timeout_error;
use crate::channel::{
    Channel, ChannelError, MessageId, StepExchange, StepMessages, WorkerId, check_name,
};
use crate::redact::redact_url;

mod client;
mod means;
pub mod server;
pub mod wire;

pub use client::PsClientError;
use client::{Server, unexpected};
pub use server::{PsLimits, PsServer, PsServerError, is_valid_secret, random_secret};
use wire::{Request, Response};

/// The environment variable the server takes its secret from (`mlless ps`).
pub const SECRET_ENV: &str = "MLLESS_PS_SECRET";
/// The port of a `ps://` URL that names none, and of `mlless ps` by default.
pub const DEFAULT_PORT: u16 = 7450;

/// The [`Channel`] on one or several parameter servers (see the [module docs](self)).
#[derive(Debug, Clone)]
pub struct PsChannel {
    servers: Arc<[Server]>,
    job: String,
    describe: String,
}

/// The expected form, for errors.
const FORM: &str = "expected ps://:SECRET@host[:port], or a comma-separated list of them";

/// `(authority, secret)` of one `ps://:SECRET@host[:port]` URL.
fn parse_one(url: &str) -> Result<(String, String)> {
    let invalid = |reason: String| ChannelError::InvalidUrl {
        url: redact_url(url),
        reason,
    };
    let Some(rest) = url.strip_prefix("ps://") else {
        return Err(invalid(FORM.into()));
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    let Some((userinfo, authority)) = rest.rsplit_once('@') else {
        return Err(invalid(format!(
            "no secret: the server prints it when it starts ({FORM})"
        )));
    };
    let secret = userinfo.split_once(':').map_or(userinfo, |(_, s)| s);
    if secret.is_empty() {
        return Err(invalid(format!("empty secret ({FORM})")));
    }
    if authority.is_empty() || authority.contains(['/', '?', '#']) {
        return Err(invalid(format!(
            "a ps URL is host[:port] and nothing else ({FORM})"
        )));
    }
    let has_port = match authority.rsplit_once(':') {
        // `[::1]` alone has colons but no port.
        Some((host, port)) if !host.ends_with(':') && !port.ends_with(']') => {
            match port.parse::<u16>() {
                Ok(p) if p > 0 => true,
                _ => return Err(invalid(format!("invalid port {port:?}"))),
            }
        }
        _ => false,
    };
    let authority = if has_port {
        authority.to_string()
    } else {
        format!("{authority}:{DEFAULT_PORT}")
    };
    Ok((authority, secret.to_string()))
}

/// `timeout` in whole milliseconds for a request's wait: at least 1, at most `u64::MAX`.
fn whole_millis(timeout: Duration) -> u64 {
    u64::try_from(timeout.as_millis().max(1)).unwrap_or(u64::MAX)
}

/// FNV-1a of `parts`, the same in every process.
fn fnv(parts: &[&[u8]]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for byte in *part {
            hash ^= u64::from(*byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        // A separator, so that ("ab", "c") and ("a", "bc") differ.
        hash ^= 0xff;
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

impl PsChannel {
    /// Connects to every server of `urls` (a comma-separated list of
    /// `ps://:SECRET@host[:port]`) for job `job_id`: each must answer and accept its secret, or
    /// this is [`ChannelError::InvalidUrl`] naming it (redacted).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: connecting writes nothing.
    pub async fn connect(urls: &str, job_id: &str) -> Result<PsChannel> {
        let list = crate::channel::server_urls(urls, FORM)?;
        let describe = list
            .iter()
            .map(|u| parse_one(u).map(|(authority, _)| format!("ps://{authority}")))
            .collect::<Result<Vec<_>, _>>()?
            .join(",");
        check_name(
            "job id",
            job_id,
            || describe.clone(),
            |j| server::check_name("job id", j),
        )?;
        let mut servers = Vec::with_capacity(list.len());
        for url in &list {
            let (authority, secret) = parse_one(url)?;
            if servers
                .iter()
                .any(|s: &Server| s.endpoint == format!("ps://{authority}"))
            {
                return Err(ChannelError::InvalidUrl {
                    url: redact_url(urls),
                    reason: format!("ps://{authority} is listed twice"),
                });
            }
            servers.push(Server::connect(url, &authority, &secret, job_id).await?);
        }
        Ok(PsChannel {
            servers: servers.into(),
            job: job_id.to_string(),
            describe,
        })
    }

    /// The same servers for another job, without connecting again (the boot ids seen stay).
    pub fn for_job(&self, job_id: &str) -> Result<PsChannel> {
        check_name(
            "job id",
            job_id,
            || self.describe(),
            |j| server::check_name("job id", j),
        )?;
        Ok(PsChannel {
            servers: self.servers.iter().map(|s| s.for_job(job_id)).collect(),
            job: job_id.to_string(),
            describe: self.describe.clone(),
        })
    }

    /// How many servers the channel shards over.
    pub fn servers(&self) -> usize {
        self.servers.len()
    }

    fn server_of_message(&self, topic: &str, step: u64, worker: WorkerId) -> usize {
        let k = self.servers.len() as u64;
        let hash = fnv(&[topic.as_bytes(), &step.to_le_bytes(), &worker.to_le_bytes()]);
        usize::try_from(hash % k).unwrap_or(0)
    }

    fn server_of_key(&self, key: &str) -> &Server {
        let k = self.servers.len() as u64;
        let index = usize::try_from(fnv(&[key.as_bytes()]) % k).unwrap_or(0);
        &self.servers[index]
    }

    fn check_topic(&self, topic: &str) -> Result<()> {
        check_name(
            "topic",
            topic,
            || self.describe(),
            |t| server::check_name("topic", t),
        )
    }

    fn check_key(&self, key: &str) -> Result<()> {
        check_name(
            "key",
            key,
            || self.describe(),
            |k| server::check_name("key", k),
        )
    }

    /// The workers of `from` by server: per server, the positions in `from` and the workers.
    fn by_server(
        &self,
        topic: &str,
        step: u64,
        from: &[WorkerId],
    ) -> Vec<(Vec<usize>, Vec<WorkerId>)> {
        let mut groups = vec![(Vec::new(), Vec::new()); self.servers.len()];
        for (position, &worker) in from.iter().enumerate() {
            let (positions, workers) = &mut groups[self.server_of_message(topic, step, worker)];
            positions.push(position);
            workers.push(worker);
        }
        groups
    }

    /// Sends `request(workers)` to every server holding some of `from`'s messages at once, and
    /// puts each answer's items back in the order of `from`. The first server to fail ends the
    /// calls to the others (their connections are dropped) and is the error.
    async fn fan_out<T: Clone>(
        &self,
        (operation, topic, step): (&str, &str, u64),
        from: &[WorkerId],
        wait: Duration,
        request: impl Fn(Vec<WorkerId>) -> Request,
        items: impl Fn(Response) -> Result<Vec<T>, Response>,
    ) -> Result<Vec<Option<T>>> {
        let groups = self.by_server(topic, step, from);
        let calls = groups
            .iter()
            .enumerate()
            .filter(|(_, g)| !g.1.is_empty())
            .map(|(index, (positions, workers))| {
                let server = &self.servers[index];
                let request = request(workers.clone());
                let items = &items;
                async move {
                    let answer = server
                        .call(&request, wait)
                        .await
                        .and_then(|response| items(response).map_err(|other| unexpected(&other)));
                    answer.map(|answer| (positions, answer)).map_err(|e| {
                        server.error(format!("{operation} of step {step} of topic {topic:?}"), e)
                    })
                }
            });
        // The first failure ends the others (a collect still waiting on a live server).
        let mut out: Vec<Option<T>> = vec![None; from.len()];
        for (positions, answer) in try_join_all(calls).await? {
            for (position, item) in positions.iter().zip(answer) {
                out[*position] = Some(item);
            }
        }
        Ok(out)
    }
}

/// A collect's answer from one server per worker: the message, or (the server timed out)
/// whether it was present.
#[derive(Clone)]
enum Collected {
    Message(Bytes),
    Present(bool),
}

#[async_trait::async_trait]
impl Channel for PsChannel {
    async fn publish(&self, id: MessageId<'_>, payload: Bytes) -> Result<()> {
        let MessageId { topic, step, from } = id;
        self.check_topic(topic)?;
        let server = &self.servers[self.server_of_message(topic, step, from)];
        let request = Request::Publish {
            topic: topic.to_string(),
            step,
            from,
            payload,
        };
        match server.call(&request, Duration::ZERO).await {
            Ok(Response::Done) => Ok(()),
            Ok(other) => Err(unexpected(&other)),
            Err(e) => Err(e),
        }
        .map_err(|e| {
            server.error(
                format!("publish of step {step} of topic {topic:?} from worker {from}"),
                e,
            )
        })
    }

    async fn collect(&self, messages: StepMessages<'_>, timeout: Duration) -> Result<Vec<Bytes>> {
        let StepMessages { topic, step, from } = messages;
        self.check_topic(topic)?;
        if from.is_empty() {
            return Ok(Vec::new());
        }
        let start = Instant::now();
        let timeout_ms = whole_millis(timeout);
        let collected = self
            .fan_out(
                ("collect", topic, step),
                from,
                timeout,
                |workers| Request::Collect {
                    topic: topic.to_string(),
                    step,
                    from: workers,
                    timeout_ms,
                },
                |response| match response {
                    Response::Messages(messages) => {
                        Ok(messages.into_iter().map(Collected::Message).collect())
                    }
                    Response::TimedOut { present } => {
                        Ok(present.into_iter().map(Collected::Present).collect())
                    }
                    other => Err(other),
                },
            )
            .await?;
        let all: Option<Vec<Bytes>> = collected
            .iter()
            .map(|c| match c {
                Some(Collected::Message(m)) => Some(m.clone()),
                Some(Collected::Present(_)) | None => None,
            })
            .collect();
        if let Some(messages) = all {
            return Ok(messages);
        }
        let present: Vec<bool> = collected
            .iter()
            .map(|c| matches!(c, Some(Collected::Message(_) | Collected::Present(true))))
            .collect();
        Err(timeout_error(
            self.describe(),
            messages,
            &present,
            start.elapsed(),
        ))
    }

    /// The servers average: with K servers, server `k` averages the parameters
    /// `[k·dim/K, (k+1)·dim/K)`, so that each sums a K-th of every update; the worker's header
    /// goes to the server that holds its message of the step.
    async fn publish_and_average(
        &self,
        exchange: StepExchange<'_>,
        share: Share,
    ) -> Result<Averaged> {
        let MessageId { topic, step, from } = exchange.own();
        let (peers, timeout) = (exchange.peers, exchange.timeout);
        self.check_topic(topic)?;
        let start = Instant::now();
        let bad = |worker: WorkerId, reason: String| ChannelError::BadShare {
            endpoint: self.describe(),
            topic: topic.to_string(),
            step,
            worker,
            reason,
        };
        let operation = || format!("average of step {step} of topic {topic:?} from worker {from}");
        let k = self.servers.len();
        let bounds: Vec<u64> = (0..=k as u64)
            .map(|i| i * share.dim as u64 / k as u64)
            .collect();
        let parts = if k == 1 {
            vec![share.delta]
        } else {
            let whole = share
                .delta
                .into_sparse(share.dim)
                .map_err(|e| bad(from, e.to_string()))?;
            whole
                .split_at_bounds(&bounds)
                .into_iter()
                .map(WireDelta::Sparse)
                .collect()
        };
        let header = encode_share(&share.header, &WireDelta::Sparse(SparseVector::new()))
            .map_err(|e| bad(from, format!("cannot encode its header: {e}")))?;
        let home = self.server_of_message(topic, step, from);
        let timeout_ms = whole_millis(timeout);
        let calls = parts.into_iter().enumerate().map(|(index, part)| {
            let server = &self.servers[index];
            let request = Request::Average {
                topic: topic.to_string(),
                step,
                from,
                header: (index == home).then(|| header.clone()),
                part,
                range: (bounds[index], bounds[index + 1]),
                peers: peers.to_vec(),
                timeout_ms,
            };
            async move {
                server
                    .call_counted(&request, timeout)
                    .await
                    .map_err(|e| server.error(operation(), e))
            }
        });
        let answers = try_join_all(calls).await?;
        let mut means = Vec::with_capacity(k);
        let mut headers: Vec<Option<Bytes>> = vec![None; peers.len()];
        let mut present = vec![true; peers.len()];
        let (mut timed_out, mut bytes_sent, mut bytes_received) = (false, 0, 0);
        for ((response, frames), server) in answers.into_iter().zip(self.servers.iter()) {
            bytes_sent += frames.sent;
            bytes_received += frames.received;
            match response {
                Response::Mean {
                    mean,
                    headers: found,
                } if found.len() == peers.len() => {
                    means.push(mean);
                    for (slot, header) in headers.iter_mut().zip(found) {
                        if slot.is_none() {
                            *slot = header;
                        }
                    }
                }
                Response::TimedOut { present: found } if found.len() == peers.len() => {
                    timed_out = true;
                    for (all, here) in present.iter_mut().zip(found) {
                        *all &= here;
                    }
                }
                other => return Err(server.error(operation(), unexpected(&other))),
            }
        }
        if timed_out {
            return Err(timeout_error(
                self.describe(),
                exchange.peers_messages(),
                &present,
                start.elapsed(),
            ));
        }
        let mean = SparseVector::concat(means)
            .map_err(|e| bad(from, format!("the servers' means do not join up: {e}")))?;
        let headers = headers
            .into_iter()
            .zip(peers)
            .map(|(header, &peer)| {
                header
                    .ok_or_else(|| "no server holds its header".to_string())
                    .and_then(|h| share_header(&h))
                    .map_err(|reason| bad(peer, reason))
            })
            .collect::<Result<_, _>>()?;
        Ok(Averaged {
            headers,
            mean,
            bytes_sent,
            bytes_received,
            messages_received: k as u32,
            by_servers: true,
        })
    }

    async fn poll(&self, messages: StepMessages<'_>) -> Result<Vec<Option<Bytes>>> {
        let StepMessages { topic, step, from } = messages;
        self.check_topic(topic)?;
        let polled = self
            .fan_out(
                ("poll", topic, step),
                from,
                Duration::ZERO,
                |workers| Request::Poll {
                    topic: topic.to_string(),
                    step,
                    from: workers,
                },
                |response| match response {
                    Response::Polled(messages) => Ok(messages),
                    other => Err(other),
                },
            )
            .await?;
        Ok(polled.into_iter().map(Option::flatten).collect())
    }

    async fn discard(&self, messages: StepMessages<'_>) -> Result<()> {
        let StepMessages { topic, step, from } = messages;
        self.check_topic(topic)?;
        self.fan_out(
            ("discard", topic, step),
            from,
            Duration::ZERO,
            |workers| Request::Discard {
                topic: topic.to_string(),
                step,
                from: workers,
            },
            |response| match response {
                Response::Done => Ok(Vec::<()>::new()),
                other => Err(other),
            },
        )
        .await?;
        Ok(())
    }

    async fn put_key(&self, key: &str, value: Bytes) -> Result<()> {
        self.check_key(key)?;
        let server = self.server_of_key(key);
        let request = Request::PutKey {
            key: key.to_string(),
            value,
        };
        match server.call(&request, Duration::ZERO).await {
            Ok(Response::Done) => Ok(()),
            Ok(other) => Err(unexpected(&other)),
            Err(e) => Err(e),
        }
        .map_err(|e| server.error(format!("put of key {key:?}"), e))
    }

    async fn get_key(&self, key: &str) -> Result<Option<Bytes>> {
        self.check_key(key)?;
        let server = self.server_of_key(key);
        let request = Request::GetKey {
            key: key.to_string(),
        };
        match server.call(&request, Duration::ZERO).await {
            Ok(Response::Key(value)) => Ok(value),
            Ok(other) => Err(unexpected(&other)),
            Err(e) => Err(e),
        }
        .map_err(|e| server.error(format!("get of key {key:?}"), e))
    }

    async fn cleanup(&self) -> Result<()> {
        let calls = self.servers.iter().map(|server| async move {
            match server.call(&Request::Cleanup, Duration::ZERO).await {
                Ok(Response::Done) => Ok(()),
                Ok(other) => Err(unexpected(&other)),
                Err(e) => Err(e),
            }
            .map_err(|e| server.error(format!("cleanup of job {:?}", self.job), e))
        });
        join_all(calls).await.into_iter().collect()
    }

    fn describe(&self) -> String {
        self.describe.clone()
    }

    /// Nothing: a server keeps what it was given, and one that lost it (restarted) is an error
    /// of its own.
    async fn explain_missing(&self) -> Result<Option<String>> {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_parsed() {
        assert_eq!(
            parse_one("ps://:s3cr3t-pw@h:9000").expect("parses"),
            ("h:9000".to_string(), "s3cr3t-pw".to_string())
        );
        assert_eq!(
            parse_one("ps://:pw@h").expect("parses").0,
            format!("h:{DEFAULT_PORT}")
        );
        assert_eq!(parse_one("ps://:pw@[::1]").expect("parses").0, "[::1]:7450");
        assert_eq!(
            parse_one("ps://:pw@[::1]:80").expect("parses").0,
            "[::1]:80"
        );
        for bad in [
            "ps://h:1",
            "ps://:@h:1",
            "ps://:pw@h:x",
            "ps://:pw@h/p",
            "redis://:p@h",
        ] {
            let error = parse_one(bad).expect_err(bad).to_string();
            assert!(!error.contains("pw@"), "{error}");
        }
    }

    #[test]
    fn hashing_spreads_and_is_stable() {
        assert_eq!(fnv(&[b"ab", b"c"]), fnv(&[b"ab", b"c"]));
        assert_ne!(fnv(&[b"ab", b"c"]), fnv(&[b"a", b"bc"]));
        let k = 2u64;
        let on_first = (0u32..64)
            .filter(|w| fnv(&[b"updates", &0u64.to_le_bytes(), &w.to_le_bytes()]).is_multiple_of(k))
            .count();
        assert!(
            (16..=48).contains(&on_first),
            "{on_first} of 64 on one server"
        );
    }
}
