//! Inbound that one replica at a time receives (a Telegram bot's poller; see
//! `ferry_channel::IngressCursor`): the replica holding the singleton's lease runs it, the
//! others stand by and take over once the lease lapses. Sending works on every replica.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use ferry_channel::{Channel, CursorError, IngressCursor};
use rand::Rng;

use super::Shards;
use crate::state::leases::LeaseStore;

/// A singleton's position, saved only while its lease is held at `epoch`.
struct LeasedCursor {
    leases: Arc<dyn LeaseStore>,
    name: String,
    epoch: i64,
}

#[async_trait]
impl IngressCursor for LeasedCursor {
    async fn load(&self) -> Result<Option<String>, CursorError> {
        self.leases.ingress_cursor(&self.name).await.map_err(|error| CursorError::Unavailable(error.to_string()))
    }

    async fn save(&self, position: &str) -> Result<(), CursorError> {
        match self.leases.save_ingress_cursor(&self.name, self.epoch, position).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(CursorError::LeaseLost),
            Err(error) => Err(CursorError::Unavailable(error.to_string())),
        }
    }
}

/// Receives for `channel` whenever this replica holds the singleton `name`: tries to take
/// it every renewal period (jittered), runs the channel's inbound while it holds it, and
/// stops it as soon as the lease is lost. Runs until the process ends.
pub(super) async fn receive(leases: Arc<dyn LeaseStore>, channel: Arc<dyn Channel>, name: String, shards: Shards) {
    let period = leases.timing().renew;
    loop {
        let epoch = match leases.take_ingress(&name).await {
            Ok(Some(epoch)) => epoch,
            Ok(None) => {
                pause(period).await;
                continue;
            }
            Err(error) => {
                tracing::debug!(ingress = %name, %error, "cannot take the ingress lease; retrying");
                pause(period).await;
                continue;
            }
        };
        tracing::info!(ingress = %name, epoch, "this replica receives for the channel now");
        let cursor = Arc::new(LeasedCursor { leases: leases.clone(), name: name.clone(), epoch });
        let inbound = match channel.start_singleton(cursor).await {
            Ok(inbound) => inbound,
            Err(error) => {
                tracing::warn!(ingress = %name, %error, "cannot start receiving; retrying");
                pause(period).await;
                continue;
            }
        };
        // Fed until the stream ends (the channel stopped on its own: its cursor was refused)
        // or the lease is found lost; dropping the stream stops the channel's receiving.
        let lost = async {
            loop {
                tokio::time::sleep(period / 2).await;
                if !leases.holds_ingress(&name) {
                    return;
                }
            }
        };
        tokio::select! {
            () = shards.feed(inbound) => {}
            () = lost => {}
        }
        tracing::info!(ingress = %name, "this replica stopped receiving for the channel; another may take over");
        pause(period).await;
    }
}

async fn pause(period: Duration) {
    let jitter = rand::rng().random_range(0.5..1.5);
    tokio::time::sleep(period.mul_f64(jitter)).await;
}
