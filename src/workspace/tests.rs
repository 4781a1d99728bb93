//! [`Workspaces`]' tenure of a directory: one per session and tenure,
//! however many of a turn's tools open it at once.

use std::sync::Arc;

use tokio_util::task::TaskTracker;

use super::Workspaces;
use crate::{
    config::{SandboxBackend, SandboxConfig, StoreConfig},
    store::{MemoryStore, SessionKey},
};

fn workspaces(root: &std::path::Path, tasks: TaskTracker) -> Arc<Workspaces> {
    let config = StoreConfig::for_unit_tests();
    let (notices, _) = tokio::sync::mpsc::channel(1);
    let sandbox_config = SandboxConfig { backend: SandboxBackend::Unsandboxed, ..SandboxConfig::default() };
    let sandbox = crate::sandbox::open(&sandbox_config);
    let store = Arc::new(MemoryStore::new(&config, notices));
    Workspaces::new(root.to_path_buf(), sandbox_config, sandbox, store, Vec::new(), tasks)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_opens_of_one_tenure_share_one_directory_that_stays() {
    let root = tempfile::tempdir().unwrap();
    let tasks = TaskTracker::new();
    let workspaces = workspaces(root.path(), tasks.clone());
    let key = SessionKey::new("acme", "s1");
    for _ in 0..20 {
        let opens = (0..8).map(|_| {
            let (workspaces, key) = (workspaces.clone(), key.clone());
            tokio::spawn(async move { workspaces.open(&key, 3, false).await.unwrap() })
        });
        let opened: Vec<_> = futures::future::join_all(opens).await.into_iter().map(Result::unwrap).collect();
        assert!(opened.iter().all(|w| Arc::ptr_eq(w, &opened[0])), "one workspace per tenure");
        tasks.close();
        tasks.wait().await;
        tasks.reopen();
        assert!(opened[0].dir().is_dir(), "the directory the tools use is still there");
        workspaces.release(&key, 3);
        tasks.close();
        tasks.wait().await;
        tasks.reopen();
        assert!(!opened[0].dir().exists(), "released: the directory is removed");
    }
}

#[tokio::test]
async fn a_new_tenure_replaces_the_directory_of_the_last() {
    let root = tempfile::tempdir().unwrap();
    let tasks = TaskTracker::new();
    let workspaces = workspaces(root.path(), tasks.clone());
    let key = SessionKey::new("acme", "s1");
    let first = workspaces.open(&key, 1, false).await.unwrap();
    let second = workspaces.open(&key, 2, false).await.unwrap();
    tasks.close();
    tasks.wait().await;
    assert_ne!(first.dir(), second.dir());
    assert!(!first.dir().exists() && second.dir().is_dir());
}
