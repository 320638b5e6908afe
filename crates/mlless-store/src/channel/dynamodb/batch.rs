//! Batched writes, deletes and reads, and what DynamoDB left unprocessed sent again.

use super::*;
use crate::channel::Result;

impl DynamoDbChannel {
    /// `BatchWriteItem` of `requests` (with their write units), sending again what DynamoDB
    /// leaves unprocessed.
    pub(super) async fn batch_write(&self, requests: Vec<(Value, u64)>, what: &str) -> Result<()> {
        let units: u64 = requests.iter().map(|(_, units)| units).sum();
        let mut pending: Vec<Value> = requests.into_iter().map(|(request, _)| request).collect();
        let mut pause = UNPROCESSED_BACKOFF;
        for _ in 0..UNPROCESSED_ROUNDS {
            let body = json!({ "RequestItems": { self.table.as_str(): pending } });
            let answer = self.call("BatchWriteItem", what, &body).await?;
            pending = answer["UnprocessedItems"][self.table.as_str()]
                .as_array()
                .cloned()
                .unwrap_or_default();
            if pending.is_empty() {
                self.units.add(Request::TableWrite, units);
                return Ok(());
            }
            debug!(channel = %self.endpoint, left = pending.len(), "unprocessed items, sending again");
            tokio::time::sleep(pause).await;
            pause *= 2;
        }
        Err(self.backend(
            format!("BatchWriteItem of {what} in job {}", self.job_id),
            DynamoDbError::Api {
                status: 400,
                code: "ProvisionedThroughputExceededException".into(),
                message: format!(
                    "{} items still unprocessed after {UNPROCESSED_ROUNDS} rounds",
                    pending.len()
                ),
            },
        ))
    }

    /// Deletes the items `sks` (with their sizes, for the write units), `DELETES_PER_WRITE` per
    /// request.
    pub(super) async fn delete(&self, sks: &[(String, usize)], what: &str) -> Result<()> {
        for batch in sks.chunks(DELETES_PER_WRITE) {
            let requests = batch
                .iter()
                .map(|(sk, size)| {
                    let request = json!({ "DeleteRequest": { "Key": key(&self.job_id, sk) } });
                    (request, Units::write(*size))
                })
                .collect();
            self.batch_write(requests, what).await?;
        }
        Ok(())
    }

    /// Deletes chunks no head names any more; a failure is logged (cleanup or their TTL
    /// removes them).
    pub(super) async fn delete_chunks_quietly(&self, manifest: &Manifest) {
        let sks: Vec<(String, usize)> = manifest
            .chunk_sks()
            .into_iter()
            .map(|sk| (sk, CHUNK_SIZE))
            .collect();
        if let Err(error) = self.delete(&sks, "unused chunks").await {
            debug!(%error, channel = %self.endpoint, "unused chunks left for cleanup or their TTL");
        }
    }

    /// `GetItem` (strongly consistent) of `sk`.
    pub(super) async fn get_item(&self, sk: &str) -> Result<Option<Map<String, Value>>> {
        let body = json!({
            "TableName": self.table,
            "Key": key(&self.job_id, sk),
            "ConsistentRead": true,
        });
        let answer = self.call("GetItem", sk, &body).await?;
        let item = answer.get("Item").and_then(Value::as_object).cloned();
        self.units.add(
            Request::TableRead,
            Units::read(item.as_ref().map_or(0, item_size)),
        );
        Ok(item)
    }

    /// `BatchGetItem` (strongly consistent) of `sks`, by sort key; absent items are left out.
    pub(super) async fn batch_get(
        &self,
        sks: &[String],
        what: &str,
    ) -> Result<HashMap<String, Map<String, Value>>> {
        let mut found = HashMap::new();
        for batch in sks.chunks(KEYS_PER_GET) {
            let mut pending: Vec<Value> = batch.iter().map(|sk| key(&self.job_id, sk)).collect();
            let mut pause = UNPROCESSED_BACKOFF;
            let mut rounds = 0;
            while !pending.is_empty() {
                if rounds == UNPROCESSED_ROUNDS {
                    return Err(self.backend(
                        format!("BatchGetItem of {what} in job {}", self.job_id),
                        DynamoDbError::Api {
                            status: 400,
                            code: "ProvisionedThroughputExceededException".into(),
                            message: format!(
                                "{} keys still unprocessed after {UNPROCESSED_ROUNDS} rounds",
                                pending.len()
                            ),
                        },
                    ));
                }
                if rounds > 0 {
                    tokio::time::sleep(pause).await;
                    pause *= 2;
                }
                rounds += 1;
                let body = json!({
                    "RequestItems": {
                        self.table.as_str(): { "Keys": pending, "ConsistentRead": true }
                    }
                });
                let answer = self.call("BatchGetItem", what, &body).await?;
                let items = answer["Responses"][self.table.as_str()]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                for item in items {
                    let Value::Object(item) = item else { continue };
                    self.units
                        .add(Request::TableRead, Units::read(item_size(&item)));
                    if let Some(sk) = get_s(&item, SK) {
                        found.insert(sk.to_string(), item);
                    }
                }
                pending = answer["UnprocessedKeys"][self.table.as_str()]["Keys"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
            }
            // A key that is not there costs a read unit too.
            let missing = batch.iter().filter(|sk| !found.contains_key(*sk)).count();
            self.units.add(Request::TableRead, missing as u64);
        }
        Ok(found)
    }
}
