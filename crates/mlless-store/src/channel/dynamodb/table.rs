//! The table: found and checked, or created on request (on-demand billing, TTL on).

use super::*;
use crate::channel::Result;

impl DynamoDbChannel {
    /// The table exists (or is created, with `create`), is active and has the channel's keys.
    pub(super) async fn ensure_table(&self, create: bool, url: &str) -> Result<()> {
        let invalid = |reason: String| ChannelError::InvalidUrl {
            url: redact_url(url),
            reason,
        };
        let (table, endpoint) = (&self.table, redact_url(&self.client.endpoint));
        let described = self.describe_table().await;
        let mut created = false;
        let status = match described {
            Ok(description) => self.check_keys(&description).map_err(invalid)?,
            Err(e) if e.code() == Some("ResourceNotFoundException") && create => {
                created = self.create_table().await.map_err(|e| {
                    invalid(format!("cannot create table {table} at {endpoint}: {e}"))
                })?;
                String::from("CREATING")
            }
            Err(e) if e.code() == Some("ResourceNotFoundException") => {
                return Err(invalid(format!(
                    "table {table} does not exist at {endpoint} (region {}): add ?create=true \
                     to create it, or create it with partition key `pk` and sort key `sk` \
                     (both strings) and TTL on `ttl`",
                    self.client.region
                )));
            }
            Err(e) => {
                return Err(invalid(format!(
                    "cannot use table {table} at {endpoint}: {e}"
                )));
            }
        };
        if status != "ACTIVE" {
            self.wait_active().await.map_err(invalid)?;
        }
        if created {
            let body = json!({
                "TableName": table,
                "TimeToLiveSpecification": { "Enabled": true, "AttributeName": TTL },
            });
            if let Err(error) = self.client.call("UpdateTimeToLive", &body).await {
                warn!(%error, table, "could not turn on TTL: the channel's items will not expire");
            }
        }
        Ok(())
    }

    pub(super) async fn describe_table(&self) -> Result<Value, DynamoDbError> {
        let body = json!({ "TableName": self.table });
        self.client.call("DescribeTable", &body).await
    }

    /// The table's status, if its keys are the channel's (`pk` and `sk`, strings).
    pub(super) fn check_keys(&self, description: &Value) -> Result<String, String> {
        let table = &description["Table"];
        let key_of = |kind: &str| {
            table["KeySchema"].as_array().and_then(|keys| {
                keys.iter()
                    .find(|k| k["KeyType"] == kind)
                    .and_then(|k| k["AttributeName"].as_str())
            })
        };
        let type_of = |name: &str| {
            table["AttributeDefinitions"].as_array().and_then(|defs| {
                defs.iter()
                    .find(|d| d["AttributeName"] == name)
                    .and_then(|d| d["AttributeType"].as_str())
            })
        };
        let ours = key_of("HASH") == Some(PK)
            && key_of("RANGE") == Some(SK)
            && type_of(PK) == Some("S")
            && type_of(SK) == Some("S");
        if !ours {
            return Err(format!(
                "table {} at {} has key schema {} and attributes {}, not the channel's: \
                 partition key `pk` and sort key `sk`, both strings",
                self.table,
                redact_url(&self.client.endpoint),
                table["KeySchema"],
                table["AttributeDefinitions"]
            ));
        }
        Ok(table["TableStatus"]
            .as_str()
            .unwrap_or("ACTIVE")
            .to_string())
    }

    /// Creates the table (on-demand); `false` if another client created it first.
    pub(super) async fn create_table(&self) -> Result<bool, DynamoDbError> {
        let body = json!({
            "TableName": self.table,
            "BillingMode": "PAY_PER_REQUEST",
            "AttributeDefinitions": [
                { "AttributeName": PK, "AttributeType": "S" },
                { "AttributeName": SK, "AttributeType": "S" },
            ],
            "KeySchema": [
                { "AttributeName": PK, "KeyType": "HASH" },
                { "AttributeName": SK, "KeyType": "RANGE" },
            ],
        });
        match self.client.call("CreateTable", &body).await {
            Ok(_) => {
                debug!(table = self.table, endpoint = %self.endpoint, "table created");
                Ok(true)
            }
            Err(e) if e.code() == Some("ResourceInUseException") => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Waits until the table is active, at most [`ACTIVE_TIMEOUT`].
    pub(super) async fn wait_active(&self) -> Result<(), String> {
        let started = std::time::Instant::now();
        let mut pause = Duration::from_millis(200);
        loop {
            let described = self.describe_table().await;
            match described {
                Ok(description) if description["Table"]["TableStatus"] == "ACTIVE" => {
                    return Ok(());
                }
                Ok(_) => {}
                Err(e) if e.code() == Some("ResourceNotFoundException") => {}
                Err(e) => return Err(format!("waiting for table {}: {e}", self.table)),
            }
            if started.elapsed() >= ACTIVE_TIMEOUT {
                return Err(format!(
                    "table {} at {} did not become active within {ACTIVE_TIMEOUT:?}",
                    self.table,
                    redact_url(&self.client.endpoint)
                ));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(2));
        }
    }
}
