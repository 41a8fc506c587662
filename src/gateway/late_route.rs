//! Routes whose handler arrives after the server started: a webhook channel (Telegram in
//! webhook mode, Slack's Events API) whose platform was unreachable at start-up connects
//! later, but its path must be served from the start. Until the channel is running, the path
//! answers 503 with `Retry-After`, which both platforms retry, so no update is lost.

use std::sync::{Arc, PoisonError, RwLock};

use axum::Router;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use tower::ServiceExt;

/// A slot for a channel's routes, filled once the channel connects.
#[derive(Clone, Default)]
pub struct LateRoutes {
    routes: Arc<RwLock<Option<Router>>>,
}

impl LateRoutes {
    pub fn new() -> Self {
        Self::default()
    }

    /// Routes `path` to the slot: served by the filled routes, or 503 until then.
    pub fn at(&self, path: &str) -> Router {
        let slot = self.clone();
        Router::new().route(path, any(move |request: Request| async move { slot.handle(request).await }))
    }

    /// Puts the connected channel's routes in place.
    pub fn fill(&self, routes: Router) {
        *self.routes.write().unwrap_or_else(PoisonError::into_inner) = Some(routes);
    }

    async fn handle(&self, request: Request) -> Response {
        let routes = self.routes.read().unwrap_or_else(PoisonError::into_inner).clone();
        match routes {
            Some(routes) => match routes.oneshot(request).await {
                Ok(response) => response,
                Err(never) => match never {},
            },
            None => (StatusCode::SERVICE_UNAVAILABLE, [(header::RETRY_AFTER, "5")], "this channel is still connecting")
                .into_response(),
        }
    }
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::routing::post;

    use super::*;

    async fn call(router: &Router) -> StatusCode {
        let request = Request::post("/hook").body(Body::empty()).unwrap();
        router.clone().oneshot(request).await.unwrap().status()
    }

    #[tokio::test]
    async fn a_path_answers_503_until_its_routes_arrive_then_serves_them() {
        let late = LateRoutes::new();
        let router = late.at("/hook");
        assert_eq!(call(&router).await, StatusCode::SERVICE_UNAVAILABLE);
        late.fill(Router::new().route("/hook", post(|| async { StatusCode::NO_CONTENT })));
        assert_eq!(call(&router).await, StatusCode::NO_CONTENT);
    }
}
