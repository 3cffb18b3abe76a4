"""The agent gateway's HTTP side: OpenAI's ``/v1/chat/completions`` and ``/v1/models``;
environment episodes (``POST /v1/environments/{environment}/episodes``, ``POST
/v1/episodes/{episode_id}/step``, ``GET`` / ``DELETE /v1/episodes/{episode_id}``); and
``/healthz``. Errors are OpenAI's error objects with the status the refusal carries."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from aios_rl.agents.wire import ChunkWriter, WireError, completion_body, error_body
from aios_rl.bus import get_logger
from contracts import CompletionResponse, EnvState

from .handlers import Gateway, Pending
from .logic import EPISODE_HEADER

__all__ = ["MAX_BODY_BYTES", "build_app"]

MAX_BODY_BYTES = 4 * 1024 * 1024
"""The largest request body read (a long conversation fits; more is refused with 413)."""


def _decoder(resp: CompletionResponse) -> dict[int, str]:
    texts = dict(zip(resp.token_ids, resp.token_texts, strict=False))
    for alts in resp.top_logprobs:
        texts.update({a.token_id: a.text for a in alts})
    return texts


def build_app(gw: Gateway) -> Starlette:
    log = get_logger()

    def refuse(err: WireError, what: str) -> JSONResponse:
        gw.refused += 1
        log.info("agent.refused", what=what, status=err.status, error=err.message[:300])
        return JSONResponse(error_body(err), status_code=err.status)

    async def models(request: Request) -> Response:
        try:
            return JSONResponse(await gw.models(request.headers.get("authorization")))
        except WireError as err:
            return refuse(err, "models")

    async def chat(request: Request) -> Response:
        body = await read(request)
        if isinstance(body, JSONResponse):
            return body
        try:
            pending = await gw.prepare(
                body,
                authorization=request.headers.get("authorization"),
                episode=request.headers.get(EPISODE_HEADER),
            )
            if pending.req.stream:
                return StreamingResponse(stream(pending), media_type="text/event-stream")
            answer = await gw.serve(pending)
        except WireError as err:
            return refuse(err, "chat")
        texts = _decoder(answer.response)
        return JSONResponse(
            completion_body(
                answer.request,
                answer.response,
                completion_id=answer.completion_id,
                created=answer.created,
                decode=lambda t: texts.get(t, ""),
            )
        )

    async def stream(pending: Pending) -> AsyncIterator[bytes]:
        """The answer's chunks as the text is written, then the rest of the answer. The
        completion runs to its end (and is recorded) even when the agent hangs up."""
        writer = ChunkWriter(
            pending.req,
            completion_id=f"chatcmpl-{pending.request.request_id}",
            created=pending.created,
            model=pending.request.checkpoint_id,
        )
        yield writer.start()
        written: asyncio.Queue[str] = asyncio.Queue()
        served = asyncio.create_task(gw.serve(pending, on_text=written.put_nowait))
        gw.background.add(served)
        served.add_done_callback(gw.background.discard)
        while not served.done():
            text = asyncio.create_task(written.get())
            try:
                await asyncio.wait({text, served}, return_when=asyncio.FIRST_COMPLETED)
            finally:  # the agent may hang up here: the completion goes on, the wait does not
                got = text.done()
                if not got:
                    text.cancel()
            if not got:
                break
            chunk = writer.content(text.result())
            if chunk is not None:
                yield chunk
        try:
            answer = served.result()
        except WireError as err:
            # Past the status line: OpenAI's error object as an event, then the end.
            gw.refused += 1
            log.info("agent.refused", what="chat_stream", status=err.status, error=err.message)
            yield f"data: {json.dumps(error_body(err))}\n\n".encode()
            yield b"data: [DONE]\n\n"
            return
        texts = _decoder(answer.response)
        for event in writer.finish(answer.response, lambda t: texts.get(t, "")):
            yield event

    async def read(request: Request) -> bytes | JSONResponse:
        body = b""
        async for part in request.stream():
            body += part
            if len(body) > MAX_BODY_BYTES:
                return refuse(
                    WireError(f"the body is over {MAX_BODY_BYTES} bytes", status=413), "body"
                )
        return body

    def state(doc: EnvState) -> JSONResponse:
        return JSONResponse(msgspec.to_builtins(doc))

    async def env_open(request: Request) -> Response:
        body = await read(request)
        if isinstance(body, JSONResponse):
            return body
        try:
            return state(
                await gw.env_open(
                    request.path_params["environment"],
                    body,
                    authorization=request.headers.get("authorization"),
                )
            )
        except WireError as err:
            return refuse(err, "env_open")

    async def env_step(request: Request) -> Response:
        body = await read(request)
        if isinstance(body, JSONResponse):
            return body
        try:
            return state(
                await gw.env_step(
                    request.path_params["episode_id"],
                    body,
                    authorization=request.headers.get("authorization"),
                )
            )
        except WireError as err:
            return refuse(err, "env_step")

    async def env_episode(request: Request) -> Response:
        episode = request.path_params["episode_id"]
        auth = request.headers.get("authorization")
        try:
            if request.method == "DELETE":
                return state(await gw.env_close(episode, authorization=auth))
            return state(await gw.env_state(episode, authorization=auth))
        except WireError as err:
            return refuse(err, "env_episode")

    async def healthz(request: Request) -> Response:
        return JSONResponse({"ok": True})

    return Starlette(
        routes=[
            Route("/v1/models", models, methods=["GET"]),
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/v1/environments/{environment}/episodes", env_open, methods=["POST"]),
            Route("/v1/episodes/{episode_id}/step", env_step, methods=["POST"]),
            Route("/v1/episodes/{episode_id}", env_episode, methods=["GET", "DELETE"]),
            Route("/healthz", healthz, methods=["GET"]),
        ]
    )
