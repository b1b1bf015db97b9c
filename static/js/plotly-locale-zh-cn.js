/* plotly.js Simplified Chinese locale ("zh-CN"): modebar and hover strings and the month and day names
   plotly uses on date axes. Data from plotly.js lib/locales/zh-cn.js (github.com/plotly/plotly.js, commit
   3a078e6e6a64f5dced6a2de719782347cd63d82c, whose "Download plot as a PNG" key matches the bundled v4.1.1;
   plotly.js is MIT-licensed, Copyright Plotly, Inc.). Kept here because the python plotly package ships
   plotly.min.js but no locale files, and nothing comes from a CDN.
   Loaded with `defer` right after plotly.min.js; if Plotly is not defined yet, the locale waits in
   window.PlotlyLocales, which plotly.js registers itself when it loads. */
(function () {
  "use strict";

  var locale = {
    moduleType: "locale",
    name: "zh-CN",
    dictionary: {
      "Autoscale": "自动缩放",
      "Box Select": "矩形框选",
      "Click to enter Colorscale title": "点击输入色阶的标题",
      "Click to enter Component A title": "点击输入组件A的标题",
      "Click to enter Component B title": "点击输入组件B的标题",
      "Click to enter Component C title": "点击输入组件C的标题",
      "Click to enter Plot title": "点击输入图表的标题",
      "Click to enter X axis title": "点击输入X轴的标题",
      "Click to enter Y axis title": "点击输入Y轴的标题",
      "Compare data on hover": "悬停时比较数据",
      "Double-click on legend to isolate one trace": "双击图例来突显对应轨迹",
      "Double-click to zoom back out": "双击返回缩小显示",
      "Download plot as a PNG": "下载图表为PNG格式",
      "Download plot": "下载图表",
      "Edit in Chart Studio": "在Chart Studio中编辑",
      "IE only supports svg.  Changing format to svg.": "IE只支持SVG。转换格式为SVG。",
      "Lasso Select": "套索选择",
      "Orbital rotation": "轨道旋转",
      "Pan": "平移",
      "Produced with Plotly.js": "由Plotly.js生成",
      "Reset": "重置",
      "Reset axes": "重置轴",
      "Reset camera to default": "重置镜头视角为默认状态",
      "Reset camera to last save": "重置镜头视角为上次保存状态",
      "Reset view": "重置视图",
      "Reset views": "重置视图",
      "Show closest data on hover": "悬停时显示最近的数据",
      "Snapshot succeeded": "生成快照成功",
      "Sorry, there was a problem downloading your snapshot!": "抱歉，下载快照出现问题！",
      "Taking snapshot - this may take a few seconds": "正在生成快照 - 可能需要几秒钟",
      "Zoom": "缩放",
      "Zoom in": "放大",
      "Zoom out": "缩小",
      "close:": "关闭:",
      "trace": "踪迹:",
      "lat:": "纬度:",
      "lon:": "经度:",
      "q1:": "第一四分位数:",
      "q3:": "第三四分位数:",
      "source:": "源:",
      "target:": "目标:",
      "lower fence:": "内侧栏(lower fence):",
      "upper fence:": "外侧栏(upper fence):",
      "max:": "最大值:",
      "mean ± σ:": "平均数 ± 标准差σ:",
      "mean:": "平均数:",
      "median:": "中位数:",
      "min:": "最小值:",
      "Turntable rotation": "旋转转盘:",
      "Toggle Spike Lines": "切换显示数据点辅助线(Spike Lines)",
      "open:": "打开:",
      "high:": "高:",
      "low:": "低:",
      "Toggle show closest data on hover": "切换悬停时显示最近的数据点",
      "incoming flow count:": "流入数量:",
      "outgoing flow count:": "流出数量:",
      "kde:": "kde:",
      "Click to enter radial axis title": "点击输入径向轴标题",
      "new text": "新建文本"
    },
    format: {
      days: ["星期日", "星期一", "星期二", "星期三", "星期四", "星期五", "星期六"],
      shortDays: ["周日", "周一", "周二", "周三", "周四", "周五", "周六"],
      months: ["一月", "二月", "三月", "四月", "五月", "六月", "七月", "八月", "九月", "十月", "十一月", "十二月"],
      shortMonths: ["一", "二", "三", "四", "五", "六", "七", "八", "九", "十", "十一", "十二"],
      date: "%Y-%m-%d"
    }
  };

  if (typeof Plotly === "undefined") {
    window.PlotlyLocales = window.PlotlyLocales || [];
    window.PlotlyLocales.push(locale);
  } else {
    Plotly.register(locale);
  }
})();
