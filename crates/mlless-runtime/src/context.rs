//! What every function of a job loads first: the spec, the data set and the channel.

use std::sync::Arc;

use mlless_core::{Model, ModelSpec, RatingCounts};
use mlless_store::{Channel, EmulatedChannel, RequestCounter, Store, open_channel_with};

use crate::dataset::Dataset;
use crate::error::{Result, RuntimeError};
use mlless_job::{JobSpec, SPEC_KEY};

/// The job as one function sees it.
#[derive(Debug, Clone)]
pub struct JobContext {
    /// The job spec.
    pub spec: JobSpec,
    /// The run's location: spec, model, record.
    pub run_store: Store,
    /// The training data.
    pub dataset: Dataset,
    /// The exchange between functions.
    pub channel: Arc<dyn Channel>,
    /// The training set's rating counts, when the model's count-aware prior needs them.
    pub rating_counts: Option<Arc<RatingCounts>>,
    /// The object-store requests of this function (run store, data set, object-store
    /// channel), for the bill.
    pub requests: RequestCounter,
}

impl JobContext {
    /// Loads the job whose spec is at `run_url`.
    pub async fn load(run_url: &str) -> Result<Self> {
        let requests = RequestCounter::new();
        let run_store = Store::open(run_url)?.with_request_counter(requests.clone());
        let bytes = run_store.get(SPEC_KEY).await?;
        let spec: JobSpec =
            serde_json::from_slice(&bytes).map_err(|source| RuntimeError::Json {
                location: format!("{}/{SPEC_KEY}", run_store.url()),
                source,
            })?;
        // A spec is the driver's, but may be old or hand-edited: nothing is sized by its model
        // before the model is known to fit.
        crate::driver::check_model_memory(&spec.model, spec.training.limits.memory_mb)?;
        let mut data_store =
            Store::open(spec.data_url.as_str())?.with_request_counter(requests.clone());
        if spec.training.emulate.is_some() {
            // In a cloud the data set is in its object store, whatever carries the exchange.
            data_store = data_store.with_latency(&mlless_store::CloudLatency::s3());
        }
        let mut dataset = Dataset::open_store(data_store).await?;
        dataset.check_prepared_as(
            spec.dataset_id.as_deref(),
            spec.run_url.as_str(),
            spec.data_url.as_str(),
        )?;
        if spec.training.trains_on_validation {
            dataset = dataset.with_validation_in_training();
        }
        let mut channel = open_channel_with(
            spec.training
                .channel
                .as_ref()
                .map(mlless_job::SecretUrl::as_str),
            &run_store,
            &spec.job_id,
            mlless_store::ChannelOptions::default().with_grace(spec.training.channel_grace()),
        )
        .await?;
        if let Some(latency) = &spec.training.emulate {
            channel = Arc::new(EmulatedChannel::new(channel, latency.clone()));
        }
        let rating_counts = match spec.model {
            ModelSpec::MatrixFactorization { prior, .. } if prior > 0.0 => {
                dataset.rating_counts().await?.map(Arc::new)
            }
            ModelSpec::MatrixFactorization { .. }
            | ModelSpec::LogisticRegression { .. }
            | ModelSpec::Svm { .. }
            | ModelSpec::KMeans { .. }
            | ModelSpec::Mlp { .. } => None,
        };
        let ctx = Self {
            spec,
            run_store,
            dataset,
            channel,
            rating_counts,
            requests,
        };
        ctx.training_model()?;
        Ok(ctx)
    }

    /// The model the job trains, with what it needs of the data set (the rating counts of
    /// matrix factorisation's count-aware prior).
    pub fn training_model(&self) -> Result<Box<dyn Model>> {
        self.spec
            .model
            .training_model(self.rating_counts.clone())
            .map_err(|source| RuntimeError::Model {
                location: self.dataset.url().to_owned(),
                source,
            })
    }

    /// The ids of the workers of the job.
    pub fn workers(&self) -> Vec<u32> {
        (0..self.spec.training.workers).collect()
    }
}
