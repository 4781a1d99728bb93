//! `GET /v1/sessions/{id}/workspace`: a session's files as the store holds
//! them (the last commit's), as a JSON listing (`?format=json`, the
//! default: `{files: [{path, size, mode, sha256, content | content_base64}]}`,
//! the shape a create request seeds with) or a tar archive (`?format=tar`).

use axum::{
    Json,
    extract::{Path, Query, State},
    http::header,
    response::{IntoResponse, Response},
};
use base64::Engine as _;
use serde::Deserialize;
use serde_json::json;

use crate::{
    error::{ApiError, ErrorCode},
    principal::Principal,
    state::AppState,
    workspace::SeedError,
};

#[derive(Debug, Deserialize)]
pub struct WorkspaceQuery {
    pub format: Option<String>,
}

pub async fn get(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    Query(query): Query<WorkspaceQuery>,
) -> Result<Response, ApiError> {
    let tar = match query.format.as_deref() {
        None | Some("json") => false,
        Some("tar") => true,
        Some(other) => return Err(ApiError::bad_request(format!("unknown format {other:?}; known: json, tar"))),
    };
    let files = state.sessions.workspace(&principal, &id).await?;
    if tar {
        let mut archive = tar::Builder::new(Vec::new());
        for file in &files {
            let mut head = tar::Header::new_gnu();
            head.set_size(file.entry.size);
            head.set_mode(file.entry.mode);
            head.set_mtime(0);
            head.set_entry_type(tar::EntryType::Regular);
            archive.append_data(&mut head, &file.path, file.content.as_ref()).map_err(|e| {
                ApiError::new(ErrorCode::Internal, "cannot build the archive").with_detail(e.to_string())
            })?;
        }
        let bytes = archive
            .into_inner()
            .map_err(|e| ApiError::new(ErrorCode::Internal, "cannot build the archive").with_detail(e.to_string()))?;
        return Ok(([(header::CONTENT_TYPE, "application/x-tar")], bytes).into_response());
    }
    let listed: Vec<_> = files
        .iter()
        .map(|file| {
            let mut entry = json!({"path": file.path, "size": file.entry.size, "mode": format!("{:o}", file.entry.mode),
                "sha256": file.entry.digest});
            match std::str::from_utf8(&file.content) {
                Ok(text) => entry["content"] = json!(text),
                Err(_) => {
                    entry["content_base64"] = json!(base64::engine::general_purpose::STANDARD.encode(&file.content))
                }
            }
            entry
        })
        .collect();
    Ok(Json(json!({"files": listed})).into_response())
}

/// A seed that cannot be used: 400, or 413 past a cap.
pub fn seed_error(error: SeedError) -> ApiError {
    match error {
        SeedError::Invalid(message) => ApiError::bad_request(message),
        SeedError::TooLarge(message) => ApiError::new(ErrorCode::PayloadTooLarge, message),
    }
}
