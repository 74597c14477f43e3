"""The 20 response schemas and 20 tool sets `minisgl bench structured` runs on the default model."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

Short = Annotated[str, Field(max_length=40)]


class City(BaseModel):
    name: Short
    country: Short
    population: Annotated[int, Field(ge=0, le=50_000_000)]


class Color(StrEnum):
    red = "red"
    green = "green"
    blue = "blue"


class Paint(BaseModel):
    color: Color
    glossy: bool
    liters: Annotated[float, Field(gt=0, le=20)]


class Address(BaseModel):
    street: Short
    city: Short
    zip_code: Annotated[str, Field(pattern=r"^[0-9]{5}$")]


class Person(BaseModel):
    first_name: Short
    last_name: Short
    age: Annotated[int, Field(ge=0, le=120)]
    address: Address


class Recipe(BaseModel):
    title: Short
    ingredients: Annotated[list[Short], Field(min_length=1, max_length=6)]
    minutes: Annotated[int, Field(ge=1, le=600)]


class Sentiment(BaseModel):
    label: Literal["positive", "negative", "neutral"]
    confidence: Annotated[float, Field(ge=0, le=1)]


class Book(BaseModel):
    title: Short
    author: Short
    year: Annotated[int, Field(ge=1400, le=2030)]
    genres: Annotated[list[Literal["fiction", "history", "science", "poetry"]],
                      Field(max_length=3)]


class Point(BaseModel):
    x: Annotated[float, Field(ge=-100, le=100)]
    y: Annotated[float, Field(ge=-100, le=100)]


class Polygon(BaseModel):
    name: Short
    points: Annotated[list[Point], Field(min_length=3, max_length=5)]


class Weather(BaseModel):
    city: Short
    temperature_c: Annotated[float, Field(ge=-60, le=60)]
    condition: Literal["sunny", "cloudy", "rain", "snow"]


class Task(BaseModel):
    title: Short
    done: bool
    priority: Annotated[int, Field(ge=1, le=5)]


class TodoList(BaseModel):
    owner: Short
    tasks: Annotated[list[Task], Field(min_length=1, max_length=4)]


class Product(BaseModel):
    sku: Annotated[str, Field(pattern=r"^[A-Z]{3}-[0-9]{4}$")]
    price: Annotated[float, Field(ge=0, le=10_000)]
    in_stock: bool


class Order(BaseModel):
    order_id: Annotated[int, Field(ge=1)]
    items: Annotated[list[Product], Field(min_length=1, max_length=3)]
    status: Literal["pending", "shipped", "delivered"]


class Event(BaseModel):
    name: Short
    date: Annotated[str, Field(pattern=r"^20[0-9]{2}-[01][0-9]-[0-3][0-9]$")]
    attendees: Annotated[int, Field(ge=0, le=100_000)]


class Movie(BaseModel):
    title: Short
    rating: Annotated[float, Field(ge=0, le=10)]
    actors: Annotated[list[Short], Field(max_length=4)]


class Translation(BaseModel):
    source_language: Literal["en", "fr", "de", "es"]
    target_language: Literal["en", "fr", "de", "es"]
    text: Short


class Planet(BaseModel):
    name: Short
    moons: Annotated[int, Field(ge=0, le=200)]
    has_rings: bool


class SolarSystem(BaseModel):
    star: Short
    planets: Annotated[list[Planet], Field(min_length=1, max_length=3)]


class Invoice(BaseModel):
    customer: Person
    total: Annotated[float, Field(ge=0)]
    paid: bool


class Quiz(BaseModel):
    question: Short
    choices: Annotated[list[Short], Field(min_length=2, max_length=4)]
    answer_index: Annotated[int, Field(ge=0, le=3)]


class Flags(BaseModel):
    verbose: bool
    level: Literal["debug", "info", "warning"]
    retries: Annotated[int, Field(ge=0, le=10)]
    timeout_s: Annotated[float, Field(gt=0, le=300)] | None = None


SCHEMAS: list[tuple[type[BaseModel], str]] = [
    (City, "Describe the city of Lyon."), (Paint, "Suggest a paint for a bedroom."),
    (Person, "Invent a person living in Berlin."), (Recipe, "Give a pancake recipe."),
    (Sentiment, "Classify: 'I love this phone!'"), (Book, "Describe a famous novel."),
    (Polygon, "Describe a triangle."), (Weather, "Report the weather in Oslo."),
    (TodoList, "Make a todo list for moving house."), (Order, "Make an example order."),
    (Event, "Describe a music festival."), (Movie, "Describe a classic movie."),
    (Translation, "Translate 'good morning' to French."), (SolarSystem, "Describe a solar "
                                                                         "system."),
    (Invoice, "Make an example invoice."), (Quiz, "Write a geography quiz question."),
    (Flags, "Give settings for a command-line tool."), (Address, "Give an address in Paris."),
    (Task, "Describe one chore."), (Planet, "Describe Saturn."),
]


def function(name: str, description: str, properties: dict[str, Any],
             required: list[str] | None = None) -> dict[str, Any]:
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": properties,
                       "required": list(properties) if required is None else required}}}


S = {"type": "string", "maxLength": 40}
WEATHER = function("get_weather", "Current weather in a city.",
                   {"city": S, "unit": {"enum": ["celsius", "fahrenheit"]}})
SEARCH = function("search_web", "Search the web.", {"query": S, "limit": {
    "type": "integer", "minimum": 1, "maximum": 10}}, ["query"])
EMAIL = function("send_email", "Send an email.", {"to": S, "subject": S, "body": {
    "type": "string", "maxLength": 120}})
CALC = function("calculate", "Evaluate arithmetic.", {"a": {"type": "number"},
                                                      "b": {"type": "number"},
                                                      "op": {"enum": ["+", "-", "*", "/"]}})
TIMER = function("set_timer", "Start a timer.", {"minutes": {"type": "integer", "minimum": 1,
                                                             "maximum": 240}, "label": S})
FLIGHT = function("book_flight", "Book a flight.", {
    "from_airport": {"type": "string", "pattern": "^[A-Z]{3}$"},
    "to_airport": {"type": "string", "pattern": "^[A-Z]{3}$"},
    "passengers": {"type": "integer", "minimum": 1, "maximum": 9},
    "class": {"enum": ["economy", "business"]}})
TRANSLATE = function("translate", "Translate text.", {"text": S, "target": {
    "enum": ["fr", "de", "es", "it"]}})
STOCK = function("get_stock_price", "Latest price of a stock.", {"ticker": {
    "type": "string", "pattern": "^[A-Z]{1,5}$"}})
EVENT = function("create_event", "Add a calendar event.", {
    "title": S, "day": {"type": "string", "pattern": "^20[0-9]{2}-[01][0-9]-[0-3][0-9]$"},
    "attendees": {"type": "array", "items": S, "maxItems": 4}})
LIGHTS = function("set_lights", "Control the lights.", {"room": {"enum": [
    "kitchen", "bedroom", "office"]}, "on": {"type": "boolean"}, "brightness": {
    "type": "integer", "minimum": 0, "maximum": 100}}, ["room", "on"])
ORDER = function("order_food", "Order food.", {"items": {"type": "array", "minItems": 1,
                                                         "maxItems": 3, "items": {
    "type": "object", "properties": {"dish": S, "quantity": {"type": "integer", "minimum": 1,
                                                             "maximum": 5}},
    "required": ["dish", "quantity"]}}, "address": S})
NOTE = function("save_note", "Save a note.", {"text": {"type": "string", "maxLength": 80},
                                              "tags": {"type": "array", "items": S,
                                                       "maxItems": 3}}, ["text"])

TOOLSETS: list[tuple[list[dict[str, Any]], str]] = [
    ([WEATHER], "What is the weather in Paris?"),
    ([WEATHER, SEARCH], "Is it raining in Tokyo?"),
    ([SEARCH], "Find news about the Mars rover."),
    ([EMAIL], "Email bob@example.com that the meeting moved."),
    ([CALC], "What is 12 times 7?"),
    ([CALC, WEATHER], "Add 3 and 4."),
    ([TIMER], "Set a timer for pasta."),
    ([FLIGHT], "Book a flight from Paris to New York for two."),
    ([TRANSLATE], "Translate 'thank you' into German."),
    ([STOCK], "How is Apple stock doing?"),
    ([EVENT], "Schedule a team lunch next Friday."),
    ([LIGHTS], "Turn on the kitchen lights."),
    ([ORDER], "Order two pizzas to my home."),
    ([NOTE], "Remember to buy milk."),
    ([WEATHER, TIMER, NOTE], "Remind me to check the weather."),
    ([EMAIL, EVENT], "Invite Ann to a meeting on 2025-03-01."),
    ([FLIGHT, WEATHER], "Fly me to Rome, is it warm there?"),
    ([STOCK, SEARCH, CALC], "What is the price of MSFT?"),
    ([LIGHTS, TIMER], "Dim the office lights to 30 percent."),
    ([ORDER, NOTE, EMAIL], "Get me a salad for lunch."),
]
