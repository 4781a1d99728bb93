#!/usr/bin/env python3
"""Drives the official OpenAI Python SDK (`openai` on PyPI) unchanged against
Switchboard's Responses API, and prints what each step got as JSON: the
Python twin of openai-responses.mjs, with the same script.

    SWITCHBOARD_TOKEN=<jwt or API key> clients/.venv-py/bin/python \
        clients/openai_responses.py <base url> '<script json>'

Steps: {"create": {params}}, {"stream": {params}, "dropAfter"?: n},
{"retrieveStream": id, "startingAfter"?: n}, {"helper": id, "startingAfter"?: n}
(responses.stream(response_id=...) and its get_final_response()),
{"retrieve": id}, {"poll": id}, {"cancel": id}, {"delete": id},
{"inputItems": id, "query"?: {...}} (input_items.list: every item, page
after page, each validated as the SDK's `ResponseItem`), and
{"validate": "<path of an SSE transcript>"}: every event of the file checked
with the SDK's own pydantic types (`ResponseStreamEvent`, strictly: a
missing or mistyped field is an error). "on", "apiKey", "expectError" and
"$<step>.<path>" references work as in openai-responses.mjs.

Every streamed event is also validated with `ResponseStreamEvent`: a step
whose events do not validate fails.
"""

import json
import os
import sys
import time
import typing

import openai
from openai import OpenAI
from openai.types.responses import Response, ResponseItem, ResponseStreamEvent
from pydantic import TypeAdapter

EVENT = TypeAdapter(ResponseStreamEvent)
ITEM = TypeAdapter(ResponseItem)
# Each event class of the union by its `type`, so that a mistake is named
# against the one class it concerns.
EVENT_CLASSES = {
    typing.get_args(member.model_fields["type"].annotation)[0]: member
    for member in typing.get_args(typing.get_args(ResponseStreamEvent)[0])
}


def check_event(data, strict=False):
    """`data` validated as the SDK's event class of its type."""
    kind = EVENT_CLASSES.get(data.get("type"))
    if kind is None:
        raise ValueError(f"the SDK knows no event type {data.get('type')!r}")
    event = kind.model_validate(data, strict=strict)
    if "response" in data:
        Response.model_validate(data["response"], strict=strict)
    return event


def main():
    base_url, script = sys.argv[1], json.loads(sys.argv[2])
    urls = [base_url, *script.get("urls", [])]
    clients = {}

    def client(on, api_key):
        key = (on, api_key)
        if key not in clients:
            clients[key] = OpenAI(
                base_url=urls[on],
                api_key=api_key or os.environ["SWITCHBOARD_TOKEN"],
                max_retries=script.get("maxRetries", 0),
            )
        return clients[key]

    results = []

    def resolve(value):
        if isinstance(value, str) and value.startswith("$") and "." in value and value[1].isdigit():
            step, *path = value[1:].split(".")
            at = results[int(step)]
            for key in path:
                at = at[int(key)] if isinstance(at, list) else at.get(key)
            return at
        if isinstance(value, list):
            return [resolve(v) for v in value]
        if isinstance(value, dict):
            return {k: resolve(v) for k, v in value.items()}
        return value

    def collect(stream, drop_after=None):
        events = []
        try:
            for event in stream:
                data = event.model_dump(mode="json", exclude_unset=True, warnings=False)
                check_event(data)
                events.append(data)
                if drop_after is not None and len(events) >= drop_after:
                    stream.close()
                    break
        except openai.APIConnectionError as error:
            return {"events": events, "broken": repr(error)}
        return {"events": events}

    def run(step):
        api = client(step.get("on", 0), step.get("apiKey")).responses
        if "create" in step:
            response = api.create(**step["create"])
            return {"response": dump_response(response)}
        if "stream" in step:
            return collect(api.create(**step["stream"], stream=True), step.get("dropAfter"))
        if "retrieveStream" in step:
            extra = {"starting_after": step["startingAfter"]} if "startingAfter" in step else {}
            return collect(api.retrieve(step["retrieveStream"], stream=True, **extra))
        if "helper" in step:
            extra = {"starting_after": step["startingAfter"]} if "startingAfter" in step else {}
            with api.stream(response_id=step["helper"], **extra) as stream:
                events = []
                for event in stream:
                    events.append(event.model_dump(mode="json", exclude_unset=True, warnings=False))
                final = stream.get_final_response()
            return {"events": events, "response": dump_response(final), "outputText": final.output_text}
        if "retrieve" in step:
            return {"response": dump_response(api.retrieve(step["retrieve"]))}
        if "poll" in step:
            for polls in range(1, 201):
                response = api.retrieve(step["poll"])
                if response.status not in ("queued", "in_progress"):
                    return {"response": dump_response(response), "polls": polls}
                time.sleep(0.05)
            raise RuntimeError("the response never ended")
        if "cancel" in step:
            return {"response": dump_response(api.cancel(step["cancel"]))}
        if "delete" in step:
            api.delete(step["delete"])
            return {"deleted": True}
        if "inputItems" in step:
            items = []
            # The SDK fetches page after page; each item checked as its own type.
            for item in api.input_items.list(step["inputItems"], **step.get("query", {})):
                data = item.model_dump(mode="json", exclude_unset=True, warnings=False)
                ITEM.validate_python(data)
                items.append(data)
            return {"items": items}
        if "validate" in step:
            return validate(step["validate"])
        raise RuntimeError(f"unknown step {step}")

    failed = False
    for raw in script["steps"]:
        step = resolve(raw)
        try:
            results.append(run(step))
        except Exception as error:  # noqa: BLE001 - reported, as the SDK raised it
            failed = failed or not raw.get("expectError")
            results.append(
                {
                    "error": {
                        "class": type(error).__name__,
                        "status": getattr(error, "status_code", None),
                        "type": getattr(error, "type", None),
                        "code": getattr(error, "code", None),
                        "message": str(error),
                    }
                }
            )
    print(json.dumps({"steps": results}))
    sys.exit(1 if failed else 0)


def dump_response(response):
    data = response.model_dump(mode="json", exclude_unset=True, warnings=False)
    Response.model_validate(data)
    data["output_text"] = response.output_text
    return data


def validate(path):
    """Every `data:` of the SSE transcript at `path`, validated as the SDK's
    `ResponseStreamEvent` (its `response` objects as `Response`), strictly."""
    types = []
    with open(path, encoding="utf-8") as transcript:
        for line in transcript:
            if not line.startswith("data: "):
                continue
            event = check_event(json.loads(line[len("data: "):]), strict=True)
            types.append(type(event).__name__)
    return {"types": types}


if __name__ == "__main__":
    main()
