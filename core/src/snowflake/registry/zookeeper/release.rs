//! Releasing the identity: the guard stops, the worker-id claim and the `live` node are
//! given back (with the release record, so a quick restart need not wait), the session
//! closes, and the in-process claim is dropped (also when the registry is dropped).
//!
//! Apart from acquire and renew: the forever node itself stays (it is the identity's for
//! good, as in Leaf); only what says "someone issues now" goes.

use super::holder::held_identities;
use super::ZookeeperRegistry;

impl ZookeeperRegistry {
    pub(super) async fn drop_session(&self) {
        let mut st = self.state.lock().await;
        st.guard = None;
        st.own = None;
        if let Some(client) = st.client.clone() {
            if !client.state().is_terminated() {
                if let Some((_, id, _)) = &st.node {
                    self.unclaim_worker(&client, *id).await;
                }
                self.let_go(&client, &mut st, true).await;
            }
        }
        // `last_mzxid` stays: a re-acquire that finds it still the node's counts the
        // node as released (its own generator stopped issuing before).
        // Dropping the last client closes the session.
        st.client = None;
        st.node = None;
        if st.claimed {
            st.claimed = false;
            held_identities()
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&self.identity_key());
        }
    }
}

impl Drop for ZookeeperRegistry {
    fn drop(&mut self) {
        if self.state.get_mut().claimed {
            held_identities()
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&self.identity_key());
        }
    }
}
