// An endpoint's KV config against what its engine reports (settle_endpoint_kv, issue 39): a
// stated or named config the report contradicts is a usage error naming both, "auto" is the
// model's dtype (never f16), and a config nobody states is taken from the engine only where the
// engine says what it is.
#include <gtest/gtest.h>

#include "core/error.h"
#include "harness/eval/eval_plan.h"
#include "serving/adapters.h"

namespace kvgate::harness {
namespace {

serving::EngineInfo engine(serving::EngineKind kind, const std::string& kv, const std::string& model_dtype = "") {
  serving::EngineInfo info;
  info.kind = kind;
  info.kv_cache_dtype = kv;
  info.model_dtype = model_dtype;
  return info;
}

PlannedConfig endpoint_named(const std::string& name, const std::string& stated_kv = "") {
  serving::EndpointConfig e;
  e.name = name;
  e.url = "http://gpu-b:8000";
  e.kv = stated_kv;
  return endpoint_config(ConfigRole::candidate, e, 20);
}

// "" when it settles, else the usage error's text.
std::string settle(PlannedConfig& c, const serving::EngineInfo& info) {
  try {
    settle_endpoint_kv(c, info);
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    return e.what();
  }
  return "";
}

TEST(EndpointKv, AContradictionNamesWhatTheUserSaidAndWhatTheEngineSays) {
  // The case: a server started without --kv-cache-dtype behind fp8=URL.
  PlannedConfig fp8 = endpoint_named("fp8");
  const std::string m = settle(fp8, engine(serving::EngineKind::vllm, "auto"));
  EXPECT_NE(m.find("endpoint 'fp8' (http://gpu-b:8000) runs fp8_e4m3/fp8_e4m3 by its name"), std::string::npos) << m;
  EXPECT_NE(m.find("kv cache dtype 'auto' (/metrics vllm:cache_config_info{cache_dtype})"), std::string::npos) << m;
  EXPECT_NE(m.find("the model's dtype"), std::string::npos) << m;

  PlannedConfig stated = endpoint_named("candidate", "q8_0");
  const std::string s = settle(stated, engine(serving::EngineKind::sglang, "fp8_e5m2"));
  EXPECT_NE(s.find("by its \"kv\" in the endpoints file"), std::string::npos) << s;
  EXPECT_NE(s.find("'fp8_e5m2' (/server_info kv_cache_dtype)"), std::string::npos) << s;

  // Where the engine names the model's dtype, f16 is not bf16.
  PlannedConfig f16 = endpoint_named("f16");
  EXPECT_NE(settle(f16, engine(serving::EngineKind::sglang, "auto", "bfloat16")).find("its dtype is bfloat16"),
            std::string::npos);
  // A dtype kvgate refuses cannot be the config the user states.
  PlannedConfig named = endpoint_named("fp8");
  EXPECT_NE(settle(named, engine(serving::EngineKind::sglang, "mxfp8")).find("FA4"), std::string::npos);
}

TEST(EndpointKv, AgreeingReportsKeepTheStatedConfig) {
  PlannedConfig fp8 = endpoint_named("fp8");
  EXPECT_EQ(settle(fp8, engine(serving::EngineKind::vllm, "fp8")), "");  // vLLM's fp8 is fp8_e4m3
  EXPECT_EQ(fp8.kv_source, "name");
  EXPECT_EQ(fp8.spec, "endpoint:fp8=fp8_e4m3/fp8_e4m3");
  // auto, dtype unknown: any unquantized config may be it.
  PlannedConfig f16 = endpoint_named("f16");
  EXPECT_EQ(settle(f16, engine(serving::EngineKind::vllm, "auto")), "");
  EXPECT_EQ(f16.kv.canonical(), "f16/f16");
  PlannedConfig bf16 = endpoint_named("bf16");
  EXPECT_EQ(settle(bf16, engine(serving::EngineKind::sglang, "auto", "bfloat16")), "");
  // SGLang resolves auto to fp8_e4m3 for an FP8 checkpoint after /server_info is written, and
  // does not report it: kvgate holds auto to the model's dtype and says how to make it visible.
  PlannedConfig sgl_fp8 = endpoint_named("fp8");
  EXPECT_NE(settle(sgl_fp8, engine(serving::EngineKind::sglang, "auto")).find("--kv-cache-dtype fp8_e4m3 so that kvgate"),
            std::string::npos);
  PlannedConfig vllm_fp8 = endpoint_named("fp8");
  const std::string v = settle(vllm_fp8, engine(serving::EngineKind::vllm, "auto"));
  EXPECT_NE(v, "");
  EXPECT_EQ(v.find("without reporting"), std::string::npos) << "vLLM resolves it before it reports";
  // Nothing reported (llama-server): the stated config stands.
  PlannedConfig q4 = endpoint_named("q4_0");
  EXPECT_EQ(settle(q4, engine(serving::EngineKind::llama_server, "")), "");
  // SGLang's own FP4 recipe is a format now.
  PlannedConfig fp4 = endpoint_named("fp4", "fp4_mx_block16");
  EXPECT_EQ(settle(fp4, engine(serving::EngineKind::sglang, "fp4_mx_block16")), "");
}

TEST(EndpointKv, AutoIsTheModelsDtypeNeverF16) {
  PlannedConfig unnamed = endpoint_named("candidate");
  const std::string m = settle(unnamed, engine(serving::EngineKind::sglang, "auto"));
  EXPECT_NE(m.find("kvgate will not guess which"), std::string::npos) << m;
  EXPECT_NE(m.find("bf16=URL"), std::string::npos) << m;

  PlannedConfig resolved = endpoint_named("candidate");
  EXPECT_EQ(settle(resolved, engine(serving::EngineKind::sglang, "auto", "bfloat16")), "");
  EXPECT_EQ(resolved.kv.canonical(), "bf16/bf16");
  EXPECT_EQ(resolved.kv_source, "engine");
  PlannedConfig half = endpoint_named("candidate");
  EXPECT_EQ(settle(half, engine(serving::EngineKind::sglang, "auto", "half")), "");
  EXPECT_EQ(half.kv.canonical(), "f16/f16");

  // An endpoint named (or stated) "auto" means the engine's auto: settled by the engine.
  PlannedConfig named_auto = endpoint_named("auto");
  EXPECT_TRUE(named_auto.kv_source.empty());
  EXPECT_NE(settle(named_auto, engine(serving::EngineKind::vllm, "auto")).find("will not guess"), std::string::npos);
  PlannedConfig stated_auto = endpoint_named("x", "AUTO");
  EXPECT_EQ(settle(stated_auto, engine(serving::EngineKind::sglang, "auto", "float16")), "");
  EXPECT_EQ(stated_auto.kv.canonical(), "f16/f16");

  PlannedConfig reported = endpoint_named("candidate");
  EXPECT_EQ(settle(reported, engine(serving::EngineKind::sglang, "fp8_e4m3")), "");
  EXPECT_EQ(reported.kv.canonical(), "fp8_e4m3/fp8_e4m3");
  PlannedConfig nothing = endpoint_named("candidate");
  EXPECT_NE(settle(nothing, engine(serving::EngineKind::llama_server, "")).find("cannot tell which KV config"),
            std::string::npos);
}

}  // namespace
}  // namespace kvgate::harness
