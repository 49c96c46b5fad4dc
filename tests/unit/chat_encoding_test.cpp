// Chat encoding against fixtures: the expected prompts and special-token byte ranges below were produced
// by DeepSeek's own encoder (deepseek-recipe 0.2.0, DeepseekV4Encoding / DeepseekV41Encoding) for these
// requests and written down here as data; tests/e2e/test_chat_encoding_diff.py re-checks against the live
// package. Also: the JSON number spellings, this project's extensions (task tokens, numeric V4.1 effort,
// developer role) and the request loader's errors.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "format/chat_encoding.h"
#include "format/chat_request_json.h"
#include "format/json_text.h"

namespace deepinfer {
namespace {

struct EncodingFixture {
  std::string name;
  std::string request;  // chat_request_json.h shape, messages taken as written
  std::string prompt;
  std::vector<ByteRange> special_ranges;
};

const std::string kV4EffortHigh = R"__(Reasoning Effort: Absolute maximum with no shortcuts permitted.
You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the root cause, rigorously stress-testing your logic against all potential paths, edge cases, and adversarial scenarios.
Explicitly write out your entire deliberation process, documenting every intermediate step, considered alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.

)__";
const std::string kV4EffortMax = R"__(Reasoning Effort: Beyond maximum — exhaustive, relentless, and uncompromising.
You MUST reason with the utmost depth and rigor, leaving absolutely nothing to chance: exhaustively decompose the problem into its most fundamental components, trace every causal chain to its root, and resolve the underlying cause rather than any surface symptom.
Do not stop reasoning until you have independently verified the solution from multiple angles and are certain that no assumption remains unchecked and no error remains undiscovered.

)__";
const std::string kV4ToolsIntro = R"__(## Tools

You have access to a set of tools to help answer the user's question. You can invoke tools by writing a "<｜DSML｜tool_calls>" block like the following:

<｜DSML｜tool_calls>
<｜DSML｜invoke name="$TOOL_NAME">
<｜DSML｜parameter name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE</｜DSML｜parameter>
...
</｜DSML｜invoke>
<｜DSML｜invoke name="$TOOL_NAME2">
...
</｜DSML｜invoke>
</｜DSML｜tool_calls>

String parameters should be specified as is and set `string="true"`. For all other types (numbers, booleans, arrays, objects), pass the value in JSON format and set `string="false"`.

If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning inside <think>...</think> BEFORE any tool calls or final response.

Otherwise, output directly after </think> with tool calls or final response.

### Available Tool Schemas

)__";
const std::string kV41ToolsIntro = R"__(## Tools

You have access to a set of tools to help answer the user's question. You can invoke tools by writing a "<｜DSML｜ calls>" block like the following:

<｜DSML｜ calls>
<｜DSML｜ invoke name="$TOOL_NAME">
<｜DSML｜ parameter name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE</｜DSML｜ parameter>
...
</｜DSML｜ invoke>
<｜DSML｜ invoke name="$TOOL_NAME2">
...
</｜DSML｜ invoke>
</｜DSML｜ calls>

String parameters should be specified as is and set `string="true"`. For all other types (numbers, booleans, arrays, objects), pass the value in JSON format and set `string="false"`.

If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning inside <think>...</think> BEFORE any tool calls or final response.

Otherwise, output directly after </think> with tool calls or final response.

### Available Tool Schemas

)__";

const std::vector<EncodingFixture> kFixtures = {
    {"V4ChatSingleTurn",
     R"__({"version": "v4", "thinking_mode": false, "messages": [{"role": "user", "content": "Hi"}]})__",
     R"__(<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜></think>)__",
     {{0, 29}, {29, 41}, {43, 60}, {60, 68}}},
    {"V4ThinkingDropsEarlierReasoning",
     R"__({"version": "v4", "thinking_mode": true, "messages": [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4", "reasoning_content": "simple"}, {"role": "user", "content": "3+3?"}]})__",
     std::string(R"__(<｜begin▁of▁sentence｜>)__") +
         kV4EffortHigh +
         R"__(Be terse.<｜User｜>2+2?<｜Assistant｜></think>4<｜end▁of▁sentence｜><｜User｜>3+3?<｜Assistant｜><think>)__",
     {{0, 29}, {514, 526}, {530, 547}, {547, 555}, {556, 583}, {583, 595}, {599, 616}, {616, 623}}},
    {"V4EffortMax",
     R"__({"version": "v4", "thinking_mode": true, "reasoning_effort": "max", "messages": [{"role": "user", "content": "Prove it."}]})__",
     std::string(R"__(<｜begin▁of▁sentence｜>)__") +
         kV4EffortMax +
         R"__(<｜User｜>Prove it.<｜Assistant｜><think>)__",
     {{0, 29}, {557, 569}, {578, 595}, {595, 602}}},
    {"V4EffortLow",
     R"__({"version": "v4", "thinking_mode": true, "reasoning_effort": "low", "messages": [{"role": "user", "content": "Hi"}]})__",
     R"__(<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜><think>)__",
     {{0, 29}, {29, 41}, {43, 60}, {60, 67}}},
    {"V4ToolsAgentLoop",
     R"__({"version": "v4", "thinking_mode": true, "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Get the weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}}], "messages": [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "Weather in Paris and Rome?"}, {"role": "assistant", "content": "", "reasoning_content": "Need two calls.", "tool_calls": [{"id": "call_b", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Rome\", \"days\": 2}"}}, {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]}, {"role": "tool", "tool_call_id": "call_a", "content": "Paris: 21C"}, {"role": "tool", "tool_call_id": "call_b", "content": "Rome: 25C"}, {"role": "latest_reminder", "content": "Answer briefly."}]})__",
     std::string(R"__(<｜begin▁of▁sentence｜>)__") +
         kV4EffortHigh +
         R"__(You are a helpful assistant.

)__" +
         kV4ToolsIntro +
         R"__({"name": "get_weather", "description": "Get the weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}

You MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.
<｜User｜>Weather in Paris and Rome?<｜Assistant｜><think>Need two calls.</think>

<｜DSML｜tool_calls>
<｜DSML｜invoke name="get_weather">
<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>
</｜DSML｜invoke>
<｜DSML｜invoke name="get_weather">
<｜DSML｜parameter name="city" string="true">Rome</｜DSML｜parameter>
<｜DSML｜parameter name="days" string="false">2</｜DSML｜parameter>
</｜DSML｜invoke>
</｜DSML｜tool_calls><｜end▁of▁sentence｜><｜User｜><tool_result>Paris: 21C</tool_result>

<tool_result>Rome: 25C</tool_result><｜latest_reminder｜>Answer briefly.<｜Assistant｜><think>)__",
     {{0, 29}, {651, 661}, {702, 712}, {725, 735}, {762, 772}, {843, 853}, {870, 880}, {889, 899}, {932, 942}, {952, 962}, {1201, 1208}, {1258, 1265}, {1268, 1276}, {1352, 1360}, {1710, 1722}, {1748, 1765}, {1765, 1772}, {1787, 1795}, {1798, 1808}, {1821, 1831}, {1859, 1869}, {1912, 1922}, {1935, 1945}, {1954, 1964}, {1992, 2002}, {2044, 2054}, {2066, 2076}, {2116, 2126}, {2139, 2149}, {2159, 2169}, {2180, 2207}, {2207, 2219}, {2294, 2317}, {2332, 2349}, {2349, 2356}}},
    {"V4ToolChoiceRequired",
     R"__({"version": "v4", "thinking_mode": false, "tools": [{"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}], "tool_choice": "required", "messages": [{"role": "user", "content": "find cats"}]})__",
     std::string(R"__(<｜begin▁of▁sentence｜>

)__") +
         kV4ToolsIntro +
         R"__({"name": "search", "description": "", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}

You MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.
<｜User｜>find cats<｜Assistant｜></think>

<｜DSML｜tool_calls>
)__",
     {{0, 29}, {147, 157}, {198, 208}, {221, 231}, {258, 268}, {339, 349}, {366, 376}, {385, 395}, {428, 438}, {448, 458}, {697, 704}, {754, 761}, {764, 772}, {848, 856}, {1132, 1144}, {1153, 1170}, {1170, 1178}, {1181, 1191}}},
    {"V4JsonObjectFormat",
     R"__({"version": "v4", "thinking_mode": false, "response_format": {"type": "json_object"}, "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "json please"}]})__",
     R"__(<｜begin▁of▁sentence｜>s

You are a helpful assistant designed to output JSON.
## Response Format:

Reply with JSON object ONLY.<｜User｜>json please<｜Assistant｜></think>)__",
     {{0, 29}, {134, 146}, {157, 174}, {174, 182}}},
    {"V4JsonSchemaFormat",
     R"__({"version": "v4", "thinking_mode": true, "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "object", "properties": {"p": {"type": "number", "minimum": 1e-05}}}}}, "messages": [{"role": "user", "content": "x"}]})__",
     std::string(R"__(<｜begin▁of▁sentence｜>)__") +
         kV4EffortHigh +
         R"__(

## Response Format:

You MUST strictly adhere to the following schema to reply:
{"type": "object", "properties": {"p": {"type": "number", "minimum": 0.00001}}}<｜User｜>x<｜Assistant｜><think>)__",
     {{0, 29}, {666, 678}, {679, 696}, {696, 703}}},
    {"V4PrefixReasoning",
     R"__({"version": "v4", "thinking_mode": true, "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "", "reasoning_content": "Let me", "prefix": true}]})__",
     std::string(R"__(<｜begin▁of▁sentence｜>)__") +
         kV4EffortHigh +
         R"__(<｜User｜>q<｜Assistant｜><think>Let me)__",
     {{0, 29}, {505, 517}, {518, 535}, {535, 542}}},
    {"V4PrefixContent",
     R"__({"version": "v4", "thinking_mode": true, "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "The answer", "reasoning_content": "r", "prefix": true}]})__",
     std::string(R"__(<｜begin▁of▁sentence｜>)__") +
         kV4EffortHigh +
         R"__(<｜User｜>q<｜Assistant｜><think>r</think>The answer)__",
     {{0, 29}, {505, 517}, {518, 535}, {535, 542}, {543, 551}}},
    {"V4MidConversationSystemAndMergedUsers",
     R"__({"version": "v4", "thinking_mode": false, "messages": [{"role": "user", "content": "a"}, {"role": "system", "content": "new rule"}, {"role": "user", "content": "b"}, {"role": "user", "content": "c"}, {"role": "latest_reminder", "content": "r1"}, {"role": "latest_reminder", "content": "r2"}]})__",
     R"__(<｜begin▁of▁sentence｜>new rule<｜User｜>a

b

c<｜latest_reminder｜>r1<｜latest_reminder｜>r2<｜Assistant｜></think>)__",
     {{0, 29}, {37, 49}, {56, 79}, {81, 104}, {106, 123}, {123, 131}}},
    {"V4PlainSpecialSpellingsAndGrounding",
     R"__({"version": "v4", "thinking_mode": false, "messages": [{"role": "user", "content": "say <｜User｜> and </think>"}, {"role": "assistant", "content": "<｜ref｜>cat<｜/ref｜><｜box｜>(1,2)<｜/box｜> <｜User｜>"}, {"role": "user", "content": "ok"}]})__",
     R"__(<｜begin▁of▁sentence｜><｜User｜>say <｜User｜> and </think><｜Assistant｜></think><｜ref｜>cat<｜/ref｜><｜box｜>(1,2)<｜/box｜> <｜User｜><｜end▁of▁sentence｜><｜User｜>ok<｜Assistant｜></think>)__",
     {{0, 29}, {29, 41}, {70, 87}, {87, 95}, {95, 106}, {109, 121}, {121, 132}, {137, 149}, {162, 189}, {189, 201}, {203, 220}, {220, 228}}},
    {"V41ChatSingleTurn",
     R"__({"version": "v4.1", "thinking_mode": false, "messages": [{"role": "user", "content": "Hi"}]})__",
     R"__(<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜></think>)__",
     {{0, 29}, {29, 41}, {43, 60}, {60, 68}}},
    {"V41ThinkingDropsEarlierReasoning",
     R"__({"version": "v4.1", "thinking_mode": true, "messages": [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4", "reasoning_content": "simple"}, {"role": "user", "content": "3+3?"}]})__",
     R"__(<｜begin▁of▁sentence｜><｜System｜>Reasoning Effort: 75 (range 1-100, the higher the value, the more thorough the reasoning)

Be terse.<｜User｜>2+2?<｜Assistant｜></think>4<｜end▁of▁sentence｜><｜User｜>3+3?<｜Assistant｜><think>)__",
     {{0, 29}, {29, 43}, {143, 155}, {159, 176}, {176, 184}, {185, 212}, {212, 224}, {228, 245}, {245, 252}}},
    {"V41EffortMax",
     R"__({"version": "v4.1", "thinking_mode": true, "reasoning_effort": "max", "messages": [{"role": "user", "content": "Prove it."}]})__",
     R"__(<｜begin▁of▁sentence｜><｜System｜>Reasoning Effort: 100 (range 1-100, the higher the value, the more thorough the reasoning)

<｜User｜>Prove it.<｜Assistant｜><think>)__",
     {{0, 29}, {29, 43}, {135, 147}, {156, 173}, {173, 180}}},
    {"V41EffortLow",
     R"__({"version": "v4.1", "thinking_mode": true, "reasoning_effort": "low", "messages": [{"role": "user", "content": "Hi"}]})__",
     R"__(<｜begin▁of▁sentence｜><｜System｜>Reasoning Effort: 50 (range 1-100, the higher the value, the more thorough the reasoning)

<｜User｜>Hi<｜Assistant｜><think>)__",
     {{0, 29}, {29, 43}, {134, 146}, {148, 165}, {165, 172}}},
    {"V41ToolsAgentLoop",
     R"__({"version": "v4.1", "thinking_mode": true, "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Get the weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}}], "messages": [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "Weather in Paris and Rome?"}, {"role": "assistant", "content": "", "reasoning_content": "Need two calls.", "tool_calls": [{"id": "call_b", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Rome\", \"days\": 2}"}}, {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]}, {"role": "tool", "tool_call_id": "call_a", "content": "Paris: 21C"}, {"role": "tool", "tool_call_id": "call_b", "content": "Rome: 25C"}, {"role": "latest_reminder", "content": "Answer briefly."}]})__",
     std::string(R"__(<｜begin▁of▁sentence｜><｜System｜>Reasoning Effort: 75 (range 1-100, the higher the value, the more thorough the reasoning)

You are a helpful assistant.

)__") +
         kV41ToolsIntro +
         R"__({"name": "get_weather", "description": "Get the weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}

You MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.
<｜User｜>Weather in Paris and Rome?<｜Assistant｜><think>Need two calls.</think>

<｜DSML｜ calls>
<｜DSML｜ invoke name="get_weather">
<｜DSML｜ parameter name="city" string="true">Rome</｜DSML｜ parameter>
<｜DSML｜ parameter name="days" string="false">2</｜DSML｜ parameter>
</｜DSML｜ invoke>
<｜DSML｜ invoke name="get_weather">
<｜DSML｜ parameter name="city" string="true">Paris</｜DSML｜ parameter>
</｜DSML｜ invoke>
</｜DSML｜ calls><｜end▁of▁sentence｜><｜User｜><tool_result>Rome: 25C</tool_result>

<tool_result>Paris: 21C</tool_result><｜latest_reminder｜>Answer briefly.<｜Assistant｜><think>)__",
     {{0, 29}, {29, 43}, {280, 290}, {327, 337}, {346, 356}, {384, 394}, {466, 476}, {494, 504}, {514, 524}, {558, 568}, {579, 589}, {824, 831}, {881, 888}, {891, 899}, {975, 983}, {1333, 1345}, {1371, 1388}, {1388, 1395}, {1410, 1418}, {1421, 1431}, {1440, 1450}, {1479, 1489}, {1532, 1542}, {1555, 1565}, {1606, 1616}, {1630, 1640}, {1650, 1660}, {1689, 1699}, {1743, 1753}, {1767, 1777}, {1788, 1798}, {1805, 1832}, {1832, 1844}, {1919, 1942}, {1957, 1974}, {1974, 1981}}},
    {"V41ToolChoiceRequired",
     R"__({"version": "v4.1", "thinking_mode": false, "tools": [{"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}], "tool_choice": "required", "messages": [{"role": "user", "content": "find cats"}]})__",
     std::string(R"__(<｜begin▁of▁sentence｜><｜System｜>

)__") +
         kV41ToolsIntro +
         R"__({"name": "search", "description": "", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}

You MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.
<｜User｜>find cats<｜Assistant｜></think>

<｜DSML｜ calls>
)__",
     {{0, 29}, {29, 43}, {161, 171}, {208, 218}, {227, 237}, {265, 275}, {347, 357}, {375, 385}, {395, 405}, {439, 449}, {460, 470}, {705, 712}, {762, 769}, {772, 780}, {856, 864}, {1140, 1152}, {1161, 1178}, {1178, 1186}, {1189, 1199}}},
    {"V41JsonObjectFormat",
     R"__({"version": "v4.1", "thinking_mode": false, "response_format": {"type": "json_object"}, "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "json please"}]})__",
     R"__(<｜begin▁of▁sentence｜><｜System｜>s

## Response Format:

You MUST strictly adhere to the following schema to reply:
{"type": "json_object"}<｜User｜>json please<｜Assistant｜></think>)__",
     {{0, 29}, {29, 43}, {149, 161}, {172, 189}, {189, 197}}},
    {"V41JsonSchemaFormat",
     R"__({"version": "v4.1", "thinking_mode": true, "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "object", "properties": {"p": {"type": "number", "minimum": 1e-05}}}}}, "messages": [{"role": "user", "content": "x"}]})__",
     R"__(<｜begin▁of▁sentence｜><｜System｜>Reasoning Effort: 75 (range 1-100, the higher the value, the more thorough the reasoning)



## Response Format:

You MUST strictly adhere to the following schema to reply:
{"type": "object", "properties": {"p": {"type": "number", "minimum": 1e-05}}}<｜User｜>x<｜Assistant｜><think>)__",
     {{0, 29}, {29, 43}, {293, 305}, {306, 323}, {323, 330}}},
    {"V41PrefixReasoning",
     R"__({"version": "v4.1", "thinking_mode": true, "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "", "reasoning_content": "Let me", "prefix": true}]})__",
     R"__(<｜begin▁of▁sentence｜><｜System｜>Reasoning Effort: 75 (range 1-100, the higher the value, the more thorough the reasoning)

<｜User｜>q<｜Assistant｜><think>Let me)__",
     {{0, 29}, {29, 43}, {134, 146}, {147, 164}, {164, 171}}},
    {"V41PrefixContent",
     R"__({"version": "v4.1", "thinking_mode": true, "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "The answer", "reasoning_content": "r", "prefix": true}]})__",
     R"__(<｜begin▁of▁sentence｜><｜System｜>Reasoning Effort: 75 (range 1-100, the higher the value, the more thorough the reasoning)

<｜User｜>q<｜Assistant｜><think>r</think>The answer)__",
     {{0, 29}, {29, 43}, {134, 146}, {147, 164}, {164, 171}, {172, 180}}},
    {"V41MidConversationSystemAndMergedUsers",
     R"__({"version": "v4.1", "thinking_mode": false, "messages": [{"role": "user", "content": "a"}, {"role": "system", "content": "new rule"}, {"role": "user", "content": "b"}, {"role": "user", "content": "c"}, {"role": "latest_reminder", "content": "r1"}, {"role": "latest_reminder", "content": "r2"}]})__",
     R"__(<｜begin▁of▁sentence｜><｜User｜>a<｜System｜>new rule<｜User｜>b

c<｜latest_reminder｜>r1<｜Assistant｜></think>)__",
     {{0, 29}, {29, 41}, {42, 56}, {64, 76}, {80, 103}, {105, 122}, {122, 130}}},
    {"V41PlainSpecialSpellingsAndGrounding",
     R"__({"version": "v4.1", "thinking_mode": false, "messages": [{"role": "user", "content": "say <｜User｜> and </think>"}, {"role": "assistant", "content": "<｜ref｜>cat<｜/ref｜><｜box｜>(1,2)<｜/box｜> <｜User｜>"}, {"role": "user", "content": "ok"}]})__",
     R"__(<｜begin▁of▁sentence｜><｜User｜>say <｜User｜> and </think><｜Assistant｜></think><｜ref｜>cat<｜/ref｜><｜box｜>(1,2)<｜/box｜> <｜User｜><｜end▁of▁sentence｜><｜User｜>ok<｜Assistant｜></think>)__",
     {{0, 29}, {29, 41}, {70, 87}, {87, 95}, {95, 106}, {109, 121}, {121, 132}, {137, 149}, {162, 189}, {189, 201}, {203, 220}, {220, 228}}},
    {"V4ToolCallArgumentFormatting",
     R"__({"version": "v4", "thinking_mode": false, "messages": [{"role": "user", "content": "go"}, {"role": "assistant", "content": "", "tool_calls": [{"id": "2", "type": "function", "function": {"name": "f", "arguments": "{\"s\": \"Pé \\\"q\\\"\", \"n\": 0.00001, \"e\": 1e300, \"x\": 1.0, \"l\": [1, {\"k\": null}], \"b\": true}"}}, {"id": "1", "type": "function", "function": {"name": "g", "arguments": "not json"}}, {"id": "3", "type": "function", "function": {"name": "h", "arguments": "{}"}}]}, {"role": "tool", "tool_call_id": "2", "content": "r2"}, {"role": "tool", "tool_call_id": "1", "content": "r1"}, {"role": "tool", "tool_call_id": "3", "content": "r3"}]})__",
     R"__(<｜begin▁of▁sentence｜><｜User｜>go<｜Assistant｜></think>

<｜DSML｜tool_calls>
<｜DSML｜invoke name="g">
<｜DSML｜parameter name="arguments" string="true">not json</｜DSML｜parameter>
</｜DSML｜invoke>
<｜DSML｜invoke name="f">
<｜DSML｜parameter name="s" string="true">Pé "q"</｜DSML｜parameter>
<｜DSML｜parameter name="n" string="false">0.00001</｜DSML｜parameter>
<｜DSML｜parameter name="e" string="false">1e+300</｜DSML｜parameter>
<｜DSML｜parameter name="x" string="false">1.0</｜DSML｜parameter>
<｜DSML｜parameter name="l" string="false">[1, {"k": null}]</｜DSML｜parameter>
<｜DSML｜parameter name="b" string="false">true</｜DSML｜parameter>
</｜DSML｜invoke>
<｜DSML｜invoke name="h">
</｜DSML｜invoke>
</｜DSML｜tool_calls><｜end▁of▁sentence｜><｜User｜><tool_result>r1</tool_result>

<tool_result>r2</tool_result>

<tool_result>r3</tool_result><｜Assistant｜></think>)__",
     {{0, 29}, {29, 41}, {43, 60}, {60, 68}, {71, 81}, {94, 104}, {122, 132}, {183, 193}, {206, 216}, {225, 235}, {253, 263}, {305, 315}, {327, 337}, {380, 390}, {402, 412}, {454, 464}, {476, 486}, {525, 535}, {547, 557}, {609, 619}, {631, 641}, {681, 691}, {704, 714}, {723, 733}, {752, 762}, {772, 782}, {793, 820}, {820, 832}, {923, 940}, {940, 948}}},
    {"V41ToolCallArgumentFormatting",
     R"__({"version": "v4.1", "thinking_mode": false, "messages": [{"role": "user", "content": "go"}, {"role": "assistant", "content": "", "tool_calls": [{"id": "2", "type": "function", "function": {"name": "f", "arguments": "{\"s\": \"Pé \\\"q\\\"\", \"n\": 0.00001, \"e\": 1e300, \"x\": 1.0, \"l\": [1, {\"k\": null}], \"b\": true}"}}, {"id": "1", "type": "function", "function": {"name": "g", "arguments": "not json"}}, {"id": "3", "type": "function", "function": {"name": "h", "arguments": "{}"}}]}, {"role": "tool", "tool_call_id": "2", "content": "r2"}, {"role": "tool", "tool_call_id": "1", "content": "r1"}, {"role": "tool", "tool_call_id": "3", "content": "r3"}]})__",
     R"__(<｜begin▁of▁sentence｜><｜User｜>go<｜Assistant｜></think>

<｜DSML｜ calls>
<｜DSML｜ invoke name="f">
<｜DSML｜ parameter name="s" string="true">Pé "q"</｜DSML｜ parameter>
<｜DSML｜ parameter name="n" string="false">1e-05</｜DSML｜ parameter>
<｜DSML｜ parameter name="e" string="false">1e+300</｜DSML｜ parameter>
<｜DSML｜ parameter name="x" string="false">1.0</｜DSML｜ parameter>
<｜DSML｜ parameter name="l" string="false">[1, {"k": null}]</｜DSML｜ parameter>
<｜DSML｜ parameter name="b" string="false">true</｜DSML｜ parameter>
</｜DSML｜ invoke>
<｜DSML｜ invoke name="g">
<｜DSML｜ parameter name="arguments" string="true">not json</｜DSML｜ parameter>
</｜DSML｜ invoke>
<｜DSML｜ invoke name="h">

</｜DSML｜ invoke>
</｜DSML｜ calls><｜end▁of▁sentence｜><｜User｜><tool_result>r2</tool_result>

<tool_result>r1</tool_result>

<tool_result>r3</tool_result><｜Assistant｜></think>)__",
     {{0, 29}, {29, 41}, {43, 60}, {60, 68}, {71, 81}, {90, 100}, {119, 129}, {172, 182}, {195, 205}, {247, 257}, {270, 280}, {323, 333}, {346, 356}, {396, 406}, {419, 429}, {482, 492}, {505, 515}, {556, 566}, {580, 590}, {600, 610}, {629, 639}, {691, 701}, {715, 725}, {735, 745}, {766, 776}, {787, 797}, {804, 831}, {831, 843}, {934, 951}, {951, 959}}},
    {"V41SystemUpdatedToolSchemas",
     R"__({"version": "v4.1", "thinking_mode": false, "messages": [{"role": "user", "content": "a"}, {"role": "system", "content": "More tools.", "tools": [{"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]}, {"role": "user", "content": "b"}]})__",
     R"__(<｜begin▁of▁sentence｜><｜User｜>a<｜System｜>More tools.

### Updated Tool Schemas

{"name": "search", "description": "", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}<｜User｜>b<｜Assistant｜></think>)__",
     {{0, 29}, {29, 41}, {42, 56}, {207, 219}, {220, 237}, {237, 245}}},
    {"V41DeferredToolOmitted",
     R"__({"version": "v4.1", "thinking_mode": false, "tools": [{"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}, {"type": "function", "function": {"name": "get_weather", "description": "Get the weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}, "defer_loading": true}], "tool_choice": "required", "messages": [{"role": "user", "content": "x"}]})__",
     std::string(R"__(<｜begin▁of▁sentence｜><｜System｜>

)__") +
         kV41ToolsIntro +
         R"__({"name": "search", "description": "", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}

You MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.
<｜User｜>x<｜Assistant｜></think>

<｜DSML｜ calls>
)__",
     {{0, 29}, {29, 43}, {161, 171}, {208, 218}, {227, 237}, {265, 275}, {347, 357}, {375, 385}, {395, 405}, {439, 449}, {460, 470}, {705, 712}, {762, 769}, {772, 780}, {856, 864}, {1140, 1152}, {1153, 1170}, {1170, 1178}, {1181, 1191}}},
};

Result<EncodedPrompt> encode_request(const std::string& json, bool api_normalization = false) {
  ChatRequestJsonOptions options;
  options.api_normalization = api_normalization;
  Result<ChatRequest> request = chat_request_from_json_text(json, options);
  if (!request.ok()) return request.status();
  return encode_chat(request->messages, request->options);
}

TEST(ChatEncoding, MatchesDeepseekRecipeFixtures) {
  for (const EncodingFixture& fixture : kFixtures) {
    SCOPED_TRACE(fixture.name);
    Result<EncodedPrompt> prompt = encode_request(fixture.request);
    ASSERT_TRUE(prompt.ok()) << prompt.status().message();
    EXPECT_EQ(prompt->text, fixture.prompt);
    EXPECT_EQ(prompt->special_ranges, fixture.special_ranges);
  }
}

TEST(ChatEncoding, SpecialRangesCoverOnlyTemplateTokens) {
  // A special-token spelling typed by the user is plain text; the grounding token in assistant content is not.
  Result<EncodedPrompt> prompt = encode_request(
      R"({"version": "v4.1", "thinking_mode": false, "messages": [{"role": "user", "content": "<｜Assistant｜>"},
          {"role": "assistant", "content": "<｜point｜>"}, {"role": "user", "content": "x"}]})");
  ASSERT_TRUE(prompt.ok());
  std::vector<std::string> specials;
  for (const ByteRange& r : prompt->special_ranges) specials.push_back(prompt->text.substr(r.begin, r.end - r.begin));
  const std::vector<std::string> expected = {"<｜begin▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "</think>",
                                             "<｜point｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
                                             "</think>"};
  EXPECT_EQ(specials, expected);
}

TEST(ChatEncoding, NegativeZeroArgumentIsAFloat) {
  // serde_json reads the integer -0 as -0.0 (expected string from deepseek-recipe).
  Result<EncodedPrompt> prompt = encode_request(
      R"({"version": "v4", "thinking_mode": false, "messages": [{"role": "user", "content": "x"},
          {"role": "assistant", "content": "", "tool_calls": [{"id": "i", "function": {"name": "f",
           "arguments": "{\"z\": [-0, 0, \"-0\"]}"}}]}]})");
  ASSERT_TRUE(prompt.ok()) << prompt.status().message();
  EXPECT_EQ(prompt->text,
            "<｜begin▁of▁sentence｜><｜User｜>x<｜Assistant｜></think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n"
            "<｜DSML｜parameter name=\"z\" string=\"false\">[-0.0, 0, \"-0\"]</｜DSML｜parameter>\n</｜DSML｜invoke>\n"
            "</｜DSML｜tool_calls><｜end▁of▁sentence｜><｜Assistant｜></think>");
}

TEST(ChatEncoding, TaskTokenEndsTheLastUserTurn) {
  // Extension (encoding_dsv4.py's quick-instruction tasks; deepseek-recipe has none).
  Result<EncodedPrompt> title = encode_request(
      R"({"version": "v4", "thinking_mode": false, "messages": [{"role": "user", "content": "Summarize: foo", "task": "title"}]})");
  ASSERT_TRUE(title.ok());
  EXPECT_EQ(title->text, "<｜begin▁of▁sentence｜><｜User｜>Summarize: foo<｜title｜>");

  Result<EncodedPrompt> action = encode_request(
      R"({"version": "v4.1", "thinking_mode": false, "messages": [{"role": "user", "content": "do", "task": "action"}]})");
  ASSERT_TRUE(action.ok());
  EXPECT_EQ(action->text, "<｜begin▁of▁sentence｜><｜User｜>do<｜Assistant｜></think><｜action｜>");
}

TEST(ChatEncoding, AssistantAfterTaskHasNoHeader) {
  Result<EncodedPrompt> prompt = encode_request(
      R"({"version": "v4", "thinking_mode": false, "messages": [{"role": "user", "content": "q", "task": "query"},
          {"role": "assistant", "content": "cats"}, {"role": "user", "content": "next"}]})");
  ASSERT_TRUE(prompt.ok());
  EXPECT_EQ(prompt->text,
            "<｜begin▁of▁sentence｜><｜User｜>q<｜query｜>cats<｜end▁of▁sentence｜><｜User｜>next<｜Assistant｜></think>");
}

TEST(ChatEncoding, NumericEffortV41) {
  Result<EncodedPrompt> prompt =
      encode_request(R"({"version": "v4.1", "reasoning_effort": 33, "messages": [{"role": "user", "content": "Hi"}]})");
  ASSERT_TRUE(prompt.ok());
  EXPECT_EQ(prompt->text,
            "<｜begin▁of▁sentence｜><｜System｜>Reasoning Effort: 33 (range 1-100, the higher the value, the more "
            "thorough the reasoning)\n\n<｜User｜>Hi<｜Assistant｜><think>");
}

TEST(ChatEncoding, RejectsInconsistentInput) {
  EncodeOptions v4;
  v4.version = ChatModelVersion::kV4;
  v4.reasoning_effort_score = 50;
  Result<EncodedPrompt> numeric_v4 = encode_chat({Message{}}, v4);
  ASSERT_FALSE(numeric_v4.ok());
  EXPECT_NE(numeric_v4.status().message().find("reasoning_effort"), std::string::npos);

  Message assistant;
  assistant.role = ChatRole::kAssistant;
  assistant.task = ChatTask::kTitle;
  Result<EncodedPrompt> task = encode_chat({Message{}, assistant}, EncodeOptions{});
  ASSERT_FALSE(task.ok());
  EXPECT_NE(task.status().message().find("messages[1].task"), std::string::npos);
}

TEST(ChatRequestJson, ApiNormalizationFollowsDeepseekApi) {
  const std::string json = R"({"thinking": {"type": "disabled"}, "messages": [
      {"role": "system", "content": ""}, {"role": "developer", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
      {"role": "assistant", "content": "x", "reasoning_content": "r"}]})";
  Result<ChatRequest> request = chat_request_from_json_text(json, ChatRequestJsonOptions{});
  ASSERT_TRUE(request.ok()) << request.status().message();
  EXPECT_FALSE(request->options.thinking_mode);
  ASSERT_EQ(request->messages.size(), 2u);  // the empty system message is dropped
  EXPECT_EQ(request->messages[0].role, ChatRole::kUser);
  EXPECT_EQ(request->messages[0].content, "a\n\nb");
  EXPECT_FALSE(request->messages[1].reasoning_content.has_value());  // cleared outside thinking mode

  Result<ChatRequest> thinking = chat_request_from_json_text(
      R"({"reasoning_effort": "ultra", "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "x"}]})",
      ChatRequestJsonOptions{});
  ASSERT_TRUE(thinking.ok());
  EXPECT_TRUE(thinking->options.thinking_mode);
  EXPECT_EQ(thinking->options.reasoning_effort, ReasoningEffort::kMax);
  EXPECT_EQ(thinking->messages[1].reasoning_content, std::optional<std::string>(""));  // filled in thinking mode
}

TEST(ChatRequestJson, NamedToolChoiceKeepsThatToolAndRequiresIt) {
  Result<ChatRequest> request = chat_request_from_json_text(
      R"({"thinking": {"type": "disabled"},
          "tools": [{"type": "function", "function": {"name": "a"}}, {"type": "function", "function": {"name": "b"}}],
          "tool_choice": {"type": "function", "function": {"name": "b"}}, "messages": [{"role": "user", "content": "q"}]})",
      ChatRequestJsonOptions{});
  ASSERT_TRUE(request.ok());
  ASSERT_EQ(request->options.tools.size(), 1u);
  EXPECT_EQ(request->options.tools[0].name, "b");
  EXPECT_EQ(request->options.tools[0].parameters, nlohmann::ordered_json::object());
  EXPECT_EQ(request->options.tool_choice, ToolChoice::kRequired);
}

TEST(ChatRequestJson, ImagePartsAreRefusedAsNotSupportedYet) {
  for (const char* type : {"image_url", "image", "input_image"}) {
    const std::string body = std::string(R"({"messages": [{"role": "user", "content": [{"type": ")") + type + R"("}]}]})";
    Result<ChatRequest> request = chat_request_from_json_text(body, ChatRequestJsonOptions{});
    ASSERT_FALSE(request.ok()) << type;
    EXPECT_NE(request.status().message().find("image input is not supported yet"), std::string::npos) << request.status().message();
    EXPECT_NE(request.status().message().find("messages[0].content[0].type"), std::string::npos) << request.status().message();
  }
}

TEST(ChatRequestJson, ErrorsNameTheField) {
  const std::pair<std::string, std::string> cases[] = {
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]})",
       "messages[0].content[0].type"},
      {R"({"messages": [{"role": "wizard", "content": "x"}]})", "messages[0].role"},
      {R"({"messages": [{"role": "assistant", "tool_calls": [{"id": "1", "function": {}}]}]})",
       "messages[0].tool_calls[0].function.name"},
      {R"({"reasoning_effort": 101, "messages": []})", "reasoning_effort"},
      {R"({"messages": [{"role": "user", "content": "x", "task": "dance"}]})", "messages[0].task"},
      {R"({"thinking": {"type": "disabled"}, "tools": [{"type": "function", "function": {"name": "a"}}],
          "tool_choice": {"type": "function", "function": {"name": "zz"}}, "messages": []})",
       "tool_choice.function.name"},
      {R"({"tools": [{"type": "function", "function": {"name": "a"}}], "tool_choice": "required", "messages": []})",
       "tool_choice: thinking mode"},
      {R"(not json)", "not valid JSON"},
  };
  for (const auto& [json, field] : cases) {
    Result<ChatRequest> request = chat_request_from_json_text(json, ChatRequestJsonOptions{});
    ASSERT_FALSE(request.ok()) << json;
    EXPECT_NE(request.status().message().find(field), std::string::npos) << request.status().message();
  }
}

TEST(JsonText, NumbersSpelledLikeSerdeJson) {
  // Left: the JSON text given to the encoder; middle: V4 (serde_json); right: V4.1 (Python-style floats).
  const std::tuple<std::string, std::string, std::string> cases[] = {
      {"1e300", "1e+300", "1e+300"},       {"1e16", "1e+16", "1e+16"},
      {"1e15", "1000000000000000.0", "1000000000000000.0"},
      {"123456789012345678", "123456789012345678", "123456789012345678"},
      {"9.999e15", "9999000000000000.0", "9999000000000000.0"},
      {"1e-7", "1e-7", "1e-07"},           {"1.5e-7", "1.5e-7", "1.5e-07"},
      {"1e-5", "0.00001", "1e-05"},        {"1.5e-5", "0.000015", "1.5e-05"},
      {"0.0001", "0.0001", "0.0001"},      {"0.00012", "0.00012", "0.00012"},
      {"0.1", "0.1", "0.1"},               {"-0.0", "-0.0", "-0.0"},
      {"-1e-7", "-1e-7", "-1e-07"},        {"1e22", "1e+22", "1e+22"},
      {"1e-300", "1e-300", "1e-300"},      {"5e-324", "5e-324", "5e-324"},
      {"1.7976931348623157e308", "1.7976931348623157e+308", "1.7976931348623157e+308"},
      {"100.0", "100.0", "100.0"},         {"12.5", "12.5", "12.5"},
      {"123e-20", "1.23e-18", "1.23e-18"}, {"18446744073709551616", "1.8446744073709552e+19", "1.8446744073709552e+19"},
      {"1E2", "100.0", "100.0"},           {"-5", "-5", "-5"},
  };
  for (const auto& [input, spaced, python] : cases) {
    const nlohmann::ordered_json value = nlohmann::ordered_json::parse(input);
    EXPECT_EQ(json_dump(value, JsonStyle::kSpaced), spaced) << input;
    EXPECT_EQ(json_dump(value, JsonStyle::kPython), python) << input;
  }
}

TEST(JsonText, StringsAndContainers) {
  const nlohmann::ordered_json value = nlohmann::ordered_json::parse(
      "{\"z\": \"tab\\t nl\\n q\\\" bs\\\\ ctl\\u0001 del\\u007f é /\", \"a\": [true, null, {}], \"e\": []}");
  EXPECT_EQ(json_dump(value, JsonStyle::kSpaced),
            "{\"z\": \"tab\\t nl\\n q\\\" bs\\\\ ctl\\u0001 del\x7f é /\", \"a\": [true, null, {}], \"e\": []}");
}

}  // namespace
}  // namespace deepinfer
