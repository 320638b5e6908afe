//! Min-max normalisation as map-reduce over function invocations (DESIGN §9): the map tasks
//! ([`RangeMapTask`], [`ScaleMapTask`]), their rounds, and the staged minibatches they read.

use super::*;

/// A framed [`FeatureRange`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct RangeObject(pub(super) FeatureRange);

impl Message for RangeObject {
    const MAGIC: [u8; 4] = *b"MLLN";
}

/// The manifest entries of each split's minibatches, in the order given, and the ranges.
pub(super) type Normalized = (Vec<Vec<BatchInfo>>, Option<mlless_data::Normalization>);

/// Where a normalisation stopped when asked to, and whether its map tasks were killed.
pub(super) type Stopped = (PrepareStage, bool);

/// What every round of a preparation's map tasks runs with — the data set's store, the invoker,
/// the options, the caller's requests to stop — and the reports of every task run so far, which
/// the preparation's record keeps.
pub(super) struct MapRounds<'a, 'r> {
    pub(super) options: &'a PrepareOptions,
    pub(super) store: &'a Store,
    pub(super) invoker: &'a Arc<dyn Invoker>,
    pub(super) requests: &'a mut Requests<'r>,
    /// The reports of the tasks run so far, round after round, each round's in the order its
    /// tasks were invoked.
    pub(super) invocations: Vec<InvocationReport>,
}

/// The feature ranges a normalisation applies.
pub(super) enum Ranges {
    /// To compute from the staged training minibatches, of this many features.
    Compute(u32),
    /// Computed already (by the shuffle-reduce tasks of a distributed preparation).
    Known(FeatureRange),
}

/// Min-max normalisation as map-reduce over function invocations of the minibatches staged under
/// `staging/` (`staged`: each split's name and number of minibatches), with the ranges of the
/// first split (the training set) applied to every split, its rounds run on `rounds` (which keeps
/// the tasks' reports); `Ok(Err(_))` when the caller asked it to stop.
pub(super) async fn normalize<const N: usize>(
    rounds: &mut MapRounds<'_, '_>,
    staged: [(&str, usize); N],
    ranges: Ranges,
) -> Result<std::result::Result<Normalized, Stopped>> {
    let (options, store) = (rounds.options, rounds.store);
    let counts = staged;
    let tasks =
        (options.map_tasks.max(1) as usize).min(counts.first().map_or(0, |&(_, c)| c).max(1));
    let merged = match ranges {
        Ranges::Known(ranges) => ranges,
        Ranges::Compute(features) => match feature_ranges(rounds, features, counts).await? {
            Ok(merged) => merged,
            Err(stopped) => return Ok(Err(stopped)),
        },
    };
    let range_key = "staging/ranges/merged.bin".to_string();
    store
        .put(&range_key, RangeObject(merged.clone()).encode())
        .await?;

    // Map: scale and write the final minibatches.
    let items: Vec<(String, String)> = counts
        .iter()
        .flat_map(|&(split, count)| {
            (0..count).map(move |i| {
                (
                    batch_key(&format!("staging/{split}"), i),
                    batch_key(split, i),
                )
            })
        })
        .collect();
    let scale_payloads: Vec<Payload> = chunks(items, tasks)
        .into_iter()
        .enumerate()
        .map(|(task, items)| {
            Payload::ScaleMap(ScaleMapTask {
                data_url: store.url().to_string(),
                range_key: range_key.clone(),
                items,
                out_key: format!("staging/written/{task:04}.json"),
                stop_key: Some(STOP_KEY.to_string()),
            })
        })
        .collect();
    let total = counts.iter().map(|&(_, c)| c).sum();
    if let Some(stopped) = rounds.run(MapRound::Scale, &scale_payloads, total).await? {
        return Ok(Err(stopped));
    }

    let mut infos = Vec::with_capacity(counts.iter().map(|&(_, c)| c).sum());
    for payload in &scale_payloads {
        let Payload::ScaleMap(task) = payload else {
            continue;
        };
        let bytes = store.get(&task.out_key).await?;
        let written: Vec<BatchInfo> =
            serde_json::from_slice(&bytes).map_err(|source| RuntimeError::Json {
                location: format!("{}/{}", store.url(), task.out_key),
                source,
            })?;
        infos.extend(written);
    }
    store.delete_prefix("staging/").await?;
    let mut per_split = Vec::with_capacity(N);
    let mut rest = infos.into_iter();
    for &(_, count) in &counts {
        per_split.push(rest.by_ref().take(count).collect());
    }
    Ok(Ok((per_split, Some(merged.into_normalization()))))
}

/// The feature ranges of the training minibatches staged under `staging/train/` (the first of
/// `counts`), computed by a round of map tasks; `Ok(Err(_))` when the caller asked it to stop.
pub(super) async fn feature_ranges<const N: usize>(
    rounds: &mut MapRounds<'_, '_>,
    features: u32,
    counts: [(&str, usize); N],
) -> Result<std::result::Result<FeatureRange, Stopped>> {
    let (options, store) = (rounds.options, rounds.store);
    let staged_train: Vec<String> = (0..counts.first().map_or(0, |&(_, c)| c))
        .map(|i| batch_key("staging/train", i))
        .collect();
    let train_count = staged_train.len();
    let tasks = (options.map_tasks.max(1) as usize).min(train_count.max(1));

    // Map: feature ranges of each task's share of the training minibatches.
    let mut map_payloads = Vec::new();
    for (task, keys) in chunks(staged_train, tasks).into_iter().enumerate() {
        map_payloads.push(Payload::RangeMap(RangeMapTask {
            data_url: store.url().to_string(),
            features,
            keys,
            out_key: format!("staging/ranges/{task:04}.bin"),
            stop_key: Some(STOP_KEY.to_string()),
        }));
    }
    if let Some(stopped) = rounds
        .run(MapRound::Ranges, &map_payloads, train_count)
        .await?
    {
        return Ok(Err(stopped));
    }

    // Reduce: merge the ranges.
    let mut merged = FeatureRange::new(features);
    for payload in &map_payloads {
        let Payload::RangeMap(task) = payload else {
            continue;
        };
        let bytes = store.get(&task.out_key).await?;
        let range = RangeObject::decode(&bytes, || format!("{}/{}", store.url(), task.out_key))?;
        merged.merge(&range.0);
    }
    Ok(Ok(merged))
}

impl<'a, 'r> MapRounds<'a, 'r> {
    /// Rounds on `store` with `invoker` and `options`, stopping where `requests` asks; no task
    /// run yet.
    pub(super) fn new(
        options: &'a PrepareOptions,
        store: &'a Store,
        invoker: &'a Arc<dyn Invoker>,
        requests: &'a mut Requests<'r>,
    ) -> Self {
        MapRounds {
            options,
            store,
            invoker,
            requests,
            invocations: Vec::new(),
        }
    }

    /// Runs one round of map tasks (named `{round}-{i}`) to its end, their reports added to
    /// [`invocations`](Self::invocations) in the order they were invoked; see [`run_map_tasks`].
    /// Returns where it stopped, if the caller asked it to.
    pub(super) async fn run(
        &mut self,
        round: MapRound,
        payloads: &[Payload],
        minibatches: usize,
    ) -> Result<Option<Stopped>> {
        let (reports, stopped) = run_map_tasks(self, round, payloads, minibatches).await?;
        self.invocations.extend(reports);
        Ok(stopped)
    }
}

/// Runs one round of map tasks (named `{round}-{i}`) to its end; the first failure kills the
/// others and is the error. When the caller asks to stop, writes [`STOP_KEY`] so that each task
/// ends after its minibatch (and kills them all on a kill), waits for every task to end, and
/// returns where it stopped. Returns the tasks' reports, in the order they were invoked.
async fn run_map_tasks(
    rounds: &mut MapRounds<'_, '_>,
    round: MapRound,
    payloads: &[Payload],
    minibatches: usize,
) -> Result<(Vec<InvocationReport>, Option<Stopped>)> {
    let (invoker, store, options) = (rounds.invoker, rounds.store, rounds.options);
    let requests = &mut *rounds.requests;
    let stage = PrepareStage::Mapping {
        round,
        tasks: payloads.len(),
        minibatches,
    };
    if requests.stopping() {
        return Ok((Vec::new(), Some((stage, false))));
    }
    let mut running = Vec::with_capacity(payloads.len());
    for (i, payload) in payloads.iter().enumerate() {
        let invoked = invoker
            .invoke(FunctionRequest {
                name: format!("{}-{i}", round.name()),
                payload: payload.to_json()?,
                limits: options.limits,
            })
            .await;
        match invoked {
            Ok(invocation) => running.push(invocation),
            Err(e) => {
                running.iter().for_each(|r| r.kill_switch().kill());
                for invocation in running {
                    let _ = invocation.wait().await;
                }
                return Err(e.into());
            }
        }
    }
    requests.enter(stage);
    let kill_switches: Vec<_> = running.iter().map(|r| r.kill_switch()).collect();
    let mut waiting: FuturesUnordered<_> = running.into_iter().map(|r| r.wait()).collect();
    let (mut asked, mut killed) = (false, false);
    let mut failure: Option<String> = None;
    let mut error: Option<RuntimeError> = None;
    let mut reports = Vec::with_capacity(payloads.len());
    loop {
        tokio::select! {
            done = waiting.next() => match done {
                None => break,
                Some(Ok(report)) => {
                    if let Some(message) = report.describe_failure()
                        && !asked
                        && failure.is_none()
                        && error.is_none()
                    {
                        kill_switches.iter().for_each(|k| k.kill());
                        failure = Some(message);
                    }
                    reports.push(report);
                }
                Some(Err(e)) => {
                    if error.is_none() {
                        kill_switches.iter().for_each(|k| k.kill());
                        error = Some(e.into());
                    }
                }
            },
            () = requests.next_request(asked), if !killed => {
                if !asked {
                    asked = true;
                    info!(round = round.name(), "asking the map tasks to stop");
                    if let Err(e) = store.put(STOP_KEY, Bytes::from_static(b"stop")).await {
                        warn!("could not ask the map tasks to stop, so killing them: {e}");
                        killed = true;
                    }
                }
                if *requests.level.borrow() == Interrupt::Kill {
                    killed = true;
                }
                if killed {
                    warn!(round = round.name(), "killing the map tasks");
                    kill_switches.iter().for_each(|k| k.kill());
                }
            }
        }
    }
    // In the order they were invoked (they end in any order).
    reports.sort_by_key(|r| {
        r.name
            .rsplit_once('-')
            .and_then(|(_, i)| i.parse::<usize>().ok())
    });
    if asked || killed {
        return Ok((reports, Some((stage, killed))));
    }
    if let Some(e) = error {
        return Err(e);
    }
    match failure {
        Some(message) => Err(RuntimeError::FunctionFailed(message)),
        None => Ok((reports, None)),
    }
}

/// Splits `items` into `n` contiguous chunks of nearly equal size (none empty).
pub(super) fn chunks<T>(items: Vec<T>, n: usize) -> Vec<Vec<T>> {
    let n = n.clamp(1, items.len().max(1));
    let (base, extra) = (items.len() / n, items.len() % n);
    let mut out = Vec::with_capacity(n);
    let mut iter = items.into_iter();
    for i in 0..n {
        out.push(iter.by_ref().take(base + usize::from(i < extra)).collect());
    }
    out
}

/// Invokes one function per payload (named `{name}-{i}`), waits for all and returns their
/// reports; the first failure kills the others and is the error.
pub async fn run_tasks(
    invoker: &Arc<dyn Invoker>,
    name: &str,
    payloads: &[Payload],
    limits: Limits,
) -> Result<Vec<InvocationReport>> {
    let mut running = Vec::with_capacity(payloads.len());
    for (i, payload) in payloads.iter().enumerate() {
        running.push(
            invoker
                .invoke(FunctionRequest {
                    name: format!("{name}-{i}"),
                    payload: payload.to_json()?,
                    limits,
                })
                .await?,
        );
    }
    let kill_switches: Vec<_> = running.iter().map(|r| r.kill_switch()).collect();
    let mut failure = None;
    let mut reports = Vec::with_capacity(running.len());
    for invocation in running {
        let report = invocation.wait().await?;
        if let Some(message) = report.describe_failure()
            && failure.is_none()
        {
            kill_switches.iter().for_each(|k| k.kill());
            failure = Some(message);
        }
        reports.push(report);
    }
    match failure {
        Some(message) => Err(RuntimeError::FunctionFailed(message)),
        None => Ok(reports),
    }
}

/// Function body of a [`RangeMapTask`].
pub async fn run_range_map(task: RangeMapTask) -> Result<()> {
    let store = Store::open(&task.data_url)?;
    let mut range = FeatureRange::new(task.features);
    for key in &task.keys {
        if asked_to_stop(&store, task.stop_key.as_deref()).await? {
            info!("asked to stop: the ranges are not written");
            return Ok(());
        }
        if let Batch::Sparse(batch) = read_staged(&store, key).await? {
            range.observe(&batch);
        }
    }
    store
        .put(&task.out_key, RangeObject(range).encode())
        .await?;
    Ok(())
}

/// Function body of a [`ScaleMapTask`].
pub async fn run_scale_map(task: ScaleMapTask) -> Result<()> {
    let store = Store::open(&task.data_url)?;
    let bytes = store.get(&task.range_key).await?;
    let range = RangeObject::decode(&bytes, || format!("{}/{}", store.url(), task.range_key))?.0;
    let mut written = Vec::with_capacity(task.items.len());
    for (staged, key) in &task.items {
        if asked_to_stop(&store, task.stop_key.as_deref()).await? {
            info!(
                written = written.len(),
                "asked to stop: the list of minibatches written is not written"
            );
            return Ok(());
        }
        let mut batch = read_staged(&store, staged).await?;
        if let Batch::Sparse(rows) = &mut batch {
            range.apply(rows);
        }
        written.push(put_batch(&store, key.clone(), &batch).await?);
    }
    let json = serde_json::to_vec(&written).map_err(|source| RuntimeError::Json {
        location: format!("{}/{}", store.url(), task.out_key),
        source,
    })?;
    store.put(&task.out_key, Bytes::from(json)).await?;
    Ok(())
}

/// Whether the driver asked the map task to stop (the object `stop_key` exists).
pub(super) async fn asked_to_stop(store: &Store, stop_key: Option<&str>) -> Result<bool> {
    match stop_key {
        Some(key) => Ok(store.exists(key).await?),
        None => Ok(false),
    }
}

pub(super) async fn read_staged(store: &Store, key: &str) -> Result<Batch> {
    let bytes = store.get(key).await?;
    mlless_data::decode_batch(&bytes).map_err(|source| RuntimeError::Corrupt {
        location: format!("{}/{key}", store.url()),
        source,
    })
}
